import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest

from relight import open_store
from relight._internal.retry import RetryPolicy
from relight._internal.server import AsgiServer
from relight.errors import ConfigError, StoreError
from relight.records import Attempt, AttemptStatus, Mode, Rollout, RolloutRequest, RolloutStatus
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.stores.http import HttpStore
from relight.stores.http.server import check_exposure, create_app, running_server
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight_testing.clock import ManualClock
from relight_testing.faults import DroppingProxy
from relight_testing.store import SETTLE, StoreConformance, make_span


class TestHttpStoreOverSqlite(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Store]:
        with running_server(SqliteStore(tmp_path / "store.db", clock=clock)) as url:
            client = HttpStore(url)
            yield client
            await client.close()


def _span_json(**overrides: object) -> dict[str, object]:
    span: dict[str, object] = {
        "rollout_id": "r",
        "attempt_id": "a",
        "span_id": "s",
        "trace_id": "t",
        "name": "n",
        "start_time": 1,
        "end_time": 2,
    }
    span.update(overrides)
    return span


async def test_a_token_is_required_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELIGHT_STORE_TOKEN", raising=False)
    with running_server(InMemoryStore(), token="s3cret") as url:
        anonymous, wrong = HttpStore(url), HttpStore(url, token="guess")
        monkeypatch.setenv("RELIGHT_STORE_TOKEN", "s3cret")
        from_env = HttpStore(url)
        try:
            for client in (anonymous, wrong):
                with pytest.raises(StoreError, match="Bearer"):
                    await client.stats()
            assert (await from_env.stats()).spans == 0
            async with httpx.AsyncClient(base_url=url) as raw:
                reply = await raw.get("/v1/health")
            assert reply.status_code == 401
            assert reply.headers["www-authenticate"] == "Bearer"
        finally:
            for client in (anonymous, wrong, from_env):
                await client.close()


def test_serving_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="without a token"), running_server(InMemoryStore(), host="0.0.0.0"):
        pass
    for host in ("127.0.0.1", "localhost", "::1"):
        check_exposure(host, None)
    check_exposure("0.0.0.0", "s3cret")
    with pytest.raises(ConfigError, match=r"store\.example\.com"):
        check_exposure("store.example.com", None)


async def test_bodies_over_the_limit_are_refused_with_the_reason() -> None:
    store = InMemoryStore()
    (rollout,) = await store.enqueue([RolloutRequest(input="x", rollout_id="r")])
    assert await store.claim("w") is not None  # spans need an attempt: r-a1
    with running_server(store, max_body_bytes=10_000) as url:
        async with httpx.AsyncClient(base_url=url) as raw:
            declared = await raw.post("/v1/spans", content=b"[" + b" " * 20_000 + b"]")

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(20):
                    yield b" " * 1000

            streamed = await raw.post("/v1/spans", content=chunks())
        for reply in (declared, streamed):
            assert reply.status_code == 413
            assert reply.json()["error"] == "ContentTooLarge"
            assert "limit of 10000 bytes" in reply.json()["detail"]

        client = HttpStore(url, max_request_bytes=10_000)
        try:
            spans = [make_span("r", "r-a1", f"s-{i}", attributes={"text": "x" * 400}) for i in range(100)]
            await client.add_spans(spans)
            assert [s.span_id for s in await client.query_spans("r")] == [s.span_id for s in spans]
            with pytest.raises(ConfigError, match="over the store server's limit"):
                await client.add_spans([make_span("r", "r-a1", "huge", attributes={"text": "x" * 20_000})])
        finally:
            await client.close()
    assert rollout.rollout_id == "r"


async def test_bad_bodies_get_422_naming_the_fields() -> None:
    with running_server(InMemoryStore()) as url:
        async with httpx.AsyncClient(base_url=url) as raw:
            spans = await raw.post("/v1/spans", json=[_span_json(), _span_json(attempt_id=None, end_time=0)])
            enqueue = await raw.post("/v1/rollouts", json={"requests": [{"input": 1, "max_attempts": 0}]})
            not_json = await raw.post("/v1/spans", content=b"{not json")
            listing = await raw.get("/v1/rollouts", params={"status": "exploded", "limit": -1})
    assert spans.status_code == 422
    assert spans.json()["error"] == "ValidationError"
    assert "body.1.attempt_id" in spans.json()["detail"]
    assert {tuple(e["loc"]) for e in spans.json()["errors"]} == {("body", 1, "attempt_id")}
    assert enqueue.status_code == 422
    assert "body.requests.0.max_attempts" in enqueue.json()["detail"]
    assert not_json.status_code == 422
    assert listing.status_code == 422
    assert "query.status" in listing.json()["detail"]
    assert "query.limit" in listing.json()["detail"]


async def test_store_errors_map_to_statuses() -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="x", rollout_id="r")])
    claimed = await store.claim("w1")
    assert claimed is not None
    await store.finish_attempt("r", claimed[1].attempt_id, AttemptStatus.SUCCEEDED)
    with running_server(store) as url:
        async with httpx.AsyncClient(base_url=url) as raw:
            missing = await raw.get("/v1/rollout", params={"rollout_id": "nope"})
            lost = await raw.post("/v1/heartbeat", json={"rollout_id": "r", "attempt_id": claimed[1].attempt_id})
            running = await raw.post(
                "/v1/finish", json={"rollout_id": "r", "attempt_id": claimed[1].attempt_id, "status": "running"}
            )
    assert (missing.status_code, missing.json()["error"]) == (404, "NotFoundError")
    assert (lost.status_code, lost.json()["error"]) == (409, "LeaseLostError")
    assert (running.status_code, running.json()["error"]) == (422, "ConfigError")


async def test_long_polls_are_repeated_until_the_callers_timeout() -> None:
    with running_server(InMemoryStore(), max_poll_seconds=0.02) as url:
        client = HttpStore(url)
        try:
            assert await client.claim("w1", timeout=0.1) is None
            waiting = asyncio.create_task(client.claim("w1", timeout=SETTLE))
            done, _ = await asyncio.wait({waiting}, timeout=0.2)  # many server-side polls
            assert not done
            (rollout,) = await client.enqueue([RolloutRequest(input="x")])
            claimed = await asyncio.wait_for(waiting, SETTLE)
            assert claimed is not None
            assert claimed[0].rollout_id == rollout.rollout_id
            waiting_for_end = asyncio.create_task(client.wait([rollout.rollout_id]))
            done, _ = await asyncio.wait({waiting_for_end}, timeout=0.2)
            assert not done
            await client.finish_attempt(rollout.rollout_id, claimed[1].attempt_id, AttemptStatus.SUCCEEDED)
            (finished,) = await asyncio.wait_for(waiting_for_end, SETTLE)
            assert finished.status is RolloutStatus.SUCCEEDED
        finally:
            await client.close()


class _ClaimsSeen(InMemoryStore):
    """Tells the test, from the server's thread, that a claim has reached the store."""

    def __init__(self) -> None:
        super().__init__()
        self.claiming = threading.Event()

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float = 0.0,
        mode: Mode | None = None,
    ) -> tuple[Rollout, Attempt] | None:
        self.claiming.set()
        return await super().claim(worker_id, lease_seconds=lease_seconds, timeout=timeout, mode=mode)


async def test_a_client_leaving_a_long_poll_is_no_error(caplog: pytest.LogCaptureFixture) -> None:
    store = _ClaimsSeen()
    server_log = logging.getLogger("uvicorn.error")
    try:
        with running_server(store) as url:
            server_log.addHandler(caplog.handler)  # once the server has set up its logging, which drops handlers
            async with httpx.AsyncClient(base_url=url) as raw:
                polling = asyncio.create_task(raw.post("/v1/claim", json={"worker_id": "gone", "timeout": SETTLE}))
                assert await asyncio.to_thread(store.claiming.wait, SETTLE)
                polling.cancel()  # the client hangs up mid-poll, as a runner process does when it stops
    finally:
        server_log.removeHandler(caplog.handler)
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []


async def test_an_unreachable_server_is_a_store_error() -> None:
    with running_server(InMemoryStore()) as url:
        pass  # the port is free again once the server has stopped
    client = HttpStore(url)
    try:
        with pytest.raises(StoreError, match="could not reach"):
            await client.stats()
    finally:
        await client.close()
    with pytest.raises(ConfigError, match="http://"):
        HttpStore("ftp://example.com")


async def test_open_store_by_url(tmp_path: Path) -> None:
    memory = open_store("memory://")
    sqlite = open_store(f"sqlite:///{tmp_path}/by-url.db")
    assert isinstance(memory, InMemoryStore)
    assert isinstance(sqlite, SqliteStore)
    await sqlite.close()
    with running_server(InMemoryStore(), token="t") as url:
        for http in (open_store(url, token="t"), open_store(url.replace("http://", "https://"), token="t")):
            assert isinstance(http, HttpStore)
            assert isinstance(http, Store)
            await http.close()
    assert isinstance(memory, Store)
    assert isinstance(sqlite, Store)


async def test_bad_records_get_4xx_in_the_apis_shape_and_store_nothing() -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="a runner's task", rollout_id="ro-taken")])
    good = {"input": {"trace": "t"}, "rollout_id": "ro-new"}
    with running_server(store) as url:
        async with httpx.AsyncClient(base_url=url) as raw:
            no_worker = await raw.post("/v1/rollouts/recorded", json={"requests": [good]})
            empty_worker = await raw.post("/v1/rollouts/recorded", json={"requests": [good], "worker_id": ""})
            bad_request = await raw.post(
                "/v1/rollouts/recorded", json={"requests": [{**good, "max_attempts": 0}], "worker_id": "importer"}
            )
            bad_lease = await raw.post(
                "/v1/rollouts/recorded", json={"requests": [good], "worker_id": "importer", "lease_seconds": 0}
            )
            taken = await raw.post(
                "/v1/rollouts/recorded",
                json={"requests": [good, {"input": None, "rollout_id": "ro-taken"}], "worker_id": "importer"},
            )
            rollouts = await raw.get("/v1/rollouts")
    for reply, field in (
        (no_worker, "body.worker_id"),
        (empty_worker, "body.worker_id"),
        (bad_request, "body.requests.0.max_attempts"),
    ):
        assert (reply.status_code, reply.json()["error"]) == (422, "ValidationError")
        assert field in reply.json()["detail"]
    assert (bad_lease.status_code, bad_lease.json()["error"]) == (422, "ConfigError")
    assert "lease_seconds" in bad_lease.json()["detail"]
    assert (taken.status_code, taken.json()["error"]) == (409, "InvalidStateError")
    assert "ro-taken" in taken.json()["detail"]
    assert [rollout["rollout_id"] for rollout in rollouts.json()] == ["ro-taken"]


async def test_a_record_whose_reply_is_lost_is_recorded_once() -> None:
    store = InMemoryStore()
    async with AsgiServer(create_app(store)) as server, DroppingProxy(server.url) as proxy:
        proxy.drop("/v1/rollouts/recorded", when="after")
        client = HttpStore(proxy.url, retry=RetryPolicy(base_seconds=0.01))
        try:
            ((rollout, attempt),) = await client.record_rollouts(
                [RolloutRequest(input={"trace": "t"})], worker_id="importer"
            )
        finally:
            await client.close()
        assert proxy.dropped["/v1/rollouts/recorded"] == 1
        assert await store.list_rollouts() == [rollout]
        assert await store.list_attempts(rollout.rollout_id) == [attempt]
        assert attempt.worker_id == "importer"


class _RecordsSeen(InMemoryStore):
    """Tells the test, on the server's loop, that a record has reached the store."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded = asyncio.Event()

    async def record_rollouts(
        self, requests: Sequence[RolloutRequest], *, worker_id: str, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> list[tuple[Rollout, Attempt]]:
        recorded = await super().record_rollouts(requests, worker_id=worker_id, lease_seconds=lease_seconds)
        self.recorded.set()
        return recorded


async def test_a_record_retried_on_a_restarted_server_finds_what_it_recorded() -> None:
    """The reply is lost and the server restarts before the retry, so no request id saves it: the client
    recognises its own rollouts in the conflict instead of failing."""
    store = _RecordsSeen()
    first = AsgiServer(create_app(store))
    await first.start()
    port = int(first.url.rsplit(":", 1)[1])
    async with DroppingProxy(first.url) as proxy:
        proxy.drop("/v1/rollouts/recorded", when="after")
        client = HttpStore(proxy.url, retry=RetryPolicy(attempts=30, base_seconds=0.05, cap_seconds=0.5))
        try:
            recording = asyncio.create_task(
                client.record_rollouts([RolloutRequest(input={"trace": "t"})], worker_id="importer")
            )
            await asyncio.wait_for(store.recorded.wait(), SETTLE)
            await first.stop()  # the retry finds no server until the restarted one listens
            async with AsgiServer(create_app(store), port=port):
                ((rollout, attempt),) = await asyncio.wait_for(recording, SETTLE)
        finally:
            await client.close()
        assert proxy.dropped["/v1/rollouts/recorded"] == 1
        assert proxy.requests["/v1/rollouts/recorded"] >= 2
    assert await store.list_rollouts() == [rollout]
    assert await store.list_attempts(rollout.rollout_id) == [attempt]
