"""The OTLP/HTTP receiver refuses bad bodies whole, with the status the specification names, and groups
the spans it takes into rollouts. Bodies are built with OTLP's own protobuf types."""

import asyncio
import gzip
import json
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from relight import open_store
from relight._internal.server import AsgiServer
from relight.otlp import ImportOptions, create_otlp_app
from relight.records import Attempt, AttemptStatus, Rollout, RolloutRequest, RolloutStatus, SpanKind
from relight.store import DEFAULT_LEASE_SECONDS
from relight.stores.http import HttpStore
from relight.stores.http.server import running_server
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight_testing.store import SETTLE

TRACE = "5b8efff798038103d269b633813fc60c"
LLM_ATTRIBUTES = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "gpt-4o",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]),
    "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}], "finish_reason": "stop"}]
    ),
}


def _span(request: ExportTraceServiceRequest, span_id: str, *, trace: str = TRACE, **attributes: str | float) -> None:
    if not request.resource_spans:
        request.resource_spans.add().scope_spans.add()
    span = request.resource_spans[0].scope_spans[0].spans.add()
    span.trace_id, span.span_id, span.name = bytes.fromhex(trace), bytes.fromhex(span_id), "span"
    span.start_time_unix_nano, span.end_time_unix_nano = 1_000, 2_000
    for key, value in attributes.items():
        any_value = AnyValue(double_value=value) if isinstance(value, float) else AnyValue(string_value=value)
        span.attributes.append(KeyValue(key=key, value=any_value))


@pytest.fixture
def served() -> Iterator[tuple[AsgiServer, InMemoryStore]]:
    store = InMemoryStore()
    with AsgiServer(
        create_otlp_app(store, ImportOptions(reward_attribute="app.reward"), max_body_bytes=4096)
    ) as server:
        yield server, store


def _post(server: AsgiServer, body: bytes, content_type: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/traces", content=body, headers={"content-type": content_type, **headers})


def _nothing_stored(server: AsgiServer, store: InMemoryStore) -> None:
    assert server.call(store.list_rollouts()) == []
    assert server.call(store.stats()).spans == 0


def test_a_body_that_is_not_protobuf_is_refused_whole(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    response = _post(server, b"\xff\xff\xff not protobuf", "application/x-protobuf")
    assert response.status_code == 400
    from google.rpc import status_pb2

    status = status_pb2.Status.FromString(response.content)
    assert status.code == 3
    assert "not a protobuf ExportTraceServiceRequest" in status.message
    _nothing_stored(server, store)


def test_one_bad_span_refuses_the_whole_request_naming_it(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    request = ExportTraceServiceRequest()
    _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
    _span(request, "0000000000000000", **LLM_ATTRIBUTES)  # an all-zero span id is invalid
    response = _post(server, request.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 400
    from google.rpc import status_pb2

    assert "resourceSpans[0].scopeSpans[0].spans[1].spanId" in status_pb2.Status.FromString(response.content).message
    _nothing_stored(server, store)


def test_json_bodies_name_what_is_wrong(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    cases = {
        b"{not json": "not JSON",
        b"[1, 2]": "must be an object",
        json.dumps(
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00f067aa0ba902b7"}]}]}]}
        ).encode(): "resourceSpans[0].scopeSpans[0].spans[0].traceId must be hex",
        json.dumps({"resourceSpans": "many"}).encode(): "not an ExportTraceServiceRequest",
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": TRACE,
                                        "spanId": "00f067aa0ba902b7",
                                        "startTimeUnixNano": "2000",
                                        "endTimeUnixNano": "1000",
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        ).encode(): "ends (1000) before it starts (2000)",
    }
    for body, reason in cases.items():
        response = _post(server, body, "application/json")
        assert response.status_code == 400, body
        assert response.json()["code"] == 3
        assert reason in response.json()["message"], response.json()
    _nothing_stored(server, store)


def test_bodies_over_the_limit_get_413_also_once_inflated(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    request = ExportTraceServiceRequest()
    _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES, padding="x" * 5000)
    body = request.SerializeToString()
    assert len(body) > 4096
    response = _post(server, body, "application/x-protobuf")
    assert response.status_code == 413
    compressed = gzip.compress(body)
    assert len(compressed) < 4096
    inflated = _post(server, compressed, "application/x-protobuf", **{"content-encoding": "gzip"})
    assert inflated.status_code == 413
    _nothing_stored(server, store)


def test_a_truncated_gzip_body_is_400(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    request = ExportTraceServiceRequest()
    _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
    cut = gzip.compress(request.SerializeToString())[:-12]
    response = _post(server, cut, "application/x-protobuf", **{"content-encoding": "gzip"})
    assert response.status_code == 400
    _nothing_stored(server, store)


def test_an_unknown_content_type_is_415(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    response = _post(server, b"{}", "text/plain")
    assert response.status_code == 415
    assert "application/x-protobuf" in response.json()["message"]
    _nothing_stored(server, store)


def test_a_trace_becomes_a_rollout_and_later_spans_join_it(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    first = ExportTraceServiceRequest()
    _span(first, "00f067aa0ba902b7", **LLM_ATTRIBUTES, **{"app.custom": "kept"})
    response = _post(
        server, gzip.compress(first.SerializeToString()), "application/x-protobuf", **{"content-encoding": "gzip"}
    )
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    later = ExportTraceServiceRequest()
    _span(later, "1111111111111111", **{"app.reward": 1.0})  # the root, exported after its children
    _span(later, "2222222222222222", trace="6" * 32)  # a trace with no LLM call yet: kept, waiting for one
    answer = ExportTraceServiceResponse.FromString(
        _post(server, later.SerializeToString(), "application/x-protobuf").content
    )
    assert not answer.HasField("partial_success")
    rollout, waiting = server.call(store.list_rollouts())
    assert (waiting.rollout_id, waiting.status) == (f"otlp-{'6' * 32}", RolloutStatus.RUNNING)
    assert [span.span_id for span in server.call(store.query_spans(waiting.rollout_id))] == ["2222222222222222"]
    assert rollout.rollout_id == f"otlp-{TRACE}"
    assert rollout.status is RolloutStatus.SUCCEEDED
    assert rollout.metadata["source"] == "otlp"
    spans = {span.span_id: span for span in server.call(store.query_spans(rollout.rollout_id))}
    llm = spans["00f067aa0ba902b7"]
    assert llm.kind is SpanKind.LLM
    assert llm.attributes["app.custom"] == "kept"
    assert llm.attributes["relight.original.gen_ai.input.messages"] == LLM_ATTRIBUTES["gen_ai.input.messages"]
    assert json.loads(str(llm.attributes["gen_ai.input.messages"])) == [{"role": "user", "content": "Hi"}]
    assert json.loads(str(llm.attributes["gen_ai.output.messages"])) == [{"role": "assistant", "content": "Hello"}]
    assert llm.attributes["relight.import.missing"] == ["token_ids", "logprobs", "policy_version", "response_id"]
    assert spans["1111111111111111-reward-0"].attributes["relight.reward"] == 1.0


def test_traces_import_into_the_store_runners_share_and_leave_their_work_to_them(tmp_path: Path) -> None:
    """The receiver and a runner share one store server (on SQLite), as in production beside training."""
    with running_server(SqliteStore(tmp_path / "training.db")) as store_url:

        async def scenario() -> None:
            runner, imports = HttpStore(store_url), HttpStore(store_url)
            try:
                async with (
                    AsgiServer(create_otlp_app(imports, ImportOptions(reward_attribute="app.reward"))) as receiver,
                    httpx.AsyncClient() as exporter,
                ):
                    work = await runner.enqueue([RolloutRequest(input={"task": i}) for i in range(3)])
                    first = await runner.claim("runner-1")
                    assert first is not None
                    waiting = asyncio.create_task(runner.claim("runner-1", timeout=SETTLE))
                    for trace in ("1" * 32, "2" * 32):
                        request = ExportTraceServiceRequest()
                        _span(request, "00f067aa0ba902b7", trace=trace, **LLM_ATTRIBUTES, **{"app.reward": 1.0})
                        response = await exporter.post(
                            f"{receiver.url}/v1/traces",
                            content=request.SerializeToString(),
                            headers={"content-type": "application/x-protobuf"},
                        )
                        assert response.status_code == 200, response.content
                    second = await asyncio.wait_for(waiting, SETTLE)
                    assert second is not None
                    claimed = [first, second]
                    while (claim := await runner.claim("runner-1")) is not None:
                        claimed.append(claim)
                    assert [(r.rollout_id, a.worker_id) for r, a in claimed] == [
                        (rollout.rollout_id, "runner-1") for rollout in work
                    ]
                    imported = [r for r in await runner.list_rollouts() if r.metadata.get("source") == "otlp"]
                    assert [r.rollout_id for r in imported] == [f"otlp-{'1' * 32}", f"otlp-{'2' * 32}"]
                    for rollout in imported:
                        assert rollout.status is RolloutStatus.SUCCEEDED
                        (attempt,) = await runner.list_attempts(rollout.rollout_id)
                        assert (attempt.worker_id, attempt.status) == ("relight-otlp", AttemptStatus.SUCCEEDED)
                        spans = await runner.query_spans(rollout.rollout_id, attempt.attempt_id)
                        assert sorted(span.kind for span in spans) == [SpanKind.LLM, SpanKind.REWARD]
                    running = await runner.list_rollouts(status=RolloutStatus.RUNNING)
                    assert [r.rollout_id for r in running] == [r.rollout_id for r in work]
            finally:
                await runner.close()
                await imports.close()

        asyncio.run(scenario())


def test_a_trace_whose_rollout_id_another_rollout_holds_is_refused(served: tuple[AsgiServer, InMemoryStore]) -> None:
    server, store = served
    (taken,) = server.call(store.enqueue([RolloutRequest(input="a task for a runner", rollout_id=f"otlp-{TRACE}")]))
    request = ExportTraceServiceRequest()
    _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
    response = _post(server, request.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 409
    from google.rpc import status_pb2

    status = status_pb2.Status.FromString(response.content)
    assert status.code == 6  # ALREADY_EXISTS
    assert f"otlp-{TRACE}" in status.message
    assert "not imported from traces" in status.message
    assert server.call(store.list_rollouts()) == [taken]
    assert server.call(store.stats()).spans == 0
    claimed = server.call(store.claim("runner"))
    assert claimed is not None
    assert claimed[0] == taken.model_copy(update={"status": RolloutStatus.RUNNING, "attempt_count": 1})


def test_without_opentelemetry_proto_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1", None)
    with pytest.raises(ImportError, match=r"pip install 'relight\[otlp\]'"):
        create_otlp_app(InMemoryStore())


def test_a_session_attribute_groups_traces_into_one_rollout() -> None:
    store = InMemoryStore()
    with AsgiServer(create_otlp_app(store, ImportOptions(session_attribute="session.id"))) as server:
        for trace, span_id in (("1" * 32, "00f067aa0ba902b7"), ("2" * 32, "1111111111111111")):
            request = ExportTraceServiceRequest()
            _span(request, span_id, trace=trace, **LLM_ATTRIBUTES, **{"session.id": "conversation-7"})
            assert _post(server, request.SerializeToString(), "application/x-protobuf").status_code == 200
        later = ExportTraceServiceRequest()
        _span(later, "2222222222222222", trace="2" * 32)  # the second trace's root, without the attribute
        assert _post(server, later.SerializeToString(), "application/x-protobuf").status_code == 200
        (rollout,) = server.call(store.list_rollouts())
        assert rollout.rollout_id == "otlp-session-conversation-7"
        assert rollout.metadata["trace_ids"] == ["1" * 32, "2" * 32]  # the second came in an export of its own
    # A receiver started afresh on the same store still knows where the second trace went.
    with AsgiServer(create_otlp_app(store, ImportOptions(session_attribute="session.id"))) as restarted:
        latest = ExportTraceServiceRequest()
        _span(latest, "3333333333333333", trace="2" * 32)
        assert _post(restarted, latest.SerializeToString(), "application/x-protobuf").status_code == 200
        (rollout,) = restarted.call(store.list_rollouts())
        spans = restarted.call(store.query_spans(rollout.rollout_id))
    assert [span.span_id for span in spans] == [
        "00f067aa0ba902b7",
        "1111111111111111",
        "2222222222222222",
        "3333333333333333",
    ]
    assert {span.trace_id for span in spans} == {"1" * 32, "2" * 32}


def test_relight_otlp_serve_receives_until_terminated(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'traces.db'}"
    command = [sys.executable, "-m", "relight.cli", "otlp", "serve", "--store", store_url, "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"receiving OTLP traces into {store_url} at http://127.0.0.1:"), (
            line + server.communicate()[1]
        )
        request = ExportTraceServiceRequest()
        _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
        endpoint = line.split()[-1]
        response = httpx.post(
            endpoint, content=request.SerializeToString(), headers={"content-type": "application/x-protobuf"}
        )
        assert response.status_code == 200
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0

    async def stored() -> list[str]:
        opened = open_store(store_url)
        try:
            return [rollout.rollout_id for rollout in await opened.list_rollouts()]
        finally:
            await opened.close()

    assert asyncio.run(stored()) == [f"otlp-{TRACE}"]


def test_a_token_keeps_out_exporters_without_it() -> None:
    store = InMemoryStore()
    with AsgiServer(create_otlp_app(store, token="s3cret")) as server:
        request = ExportTraceServiceRequest()
        _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
        body = request.SerializeToString()
        assert _post(server, body, "application/x-protobuf").status_code == 401
        assert _post(server, body, "application/x-protobuf", authorization="Bearer s3cret").status_code == 200


def test_a_span_sent_again_is_stored_once_and_a_changed_one_is_refused(
    served: tuple[AsgiServer, InMemoryStore],
) -> None:
    server, store = served
    request = ExportTraceServiceRequest()
    _span(request, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
    body = request.SerializeToString()
    assert _post(server, body, "application/x-protobuf").status_code == 200
    assert _post(server, body, "application/x-protobuf").status_code == 200  # an exporter's retry
    changed = ExportTraceServiceRequest()
    _span(changed, "00f067aa0ba902b7", **{**LLM_ATTRIBUTES, "gen_ai.request.model": "other"})
    _span(changed, "1111111111111111", **{"app.reward": 1.0})
    response = _post(server, changed.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 400
    assert server.call(store.stats()).spans == 1
    assert httpx.get(f"{server.url}/stats").json()["refused_exports"] == {"400": 1}  # counted, as well as answered


class _AnotherReceiverFirst(InMemoryStore):
    """A store where, once, another receiver's import lands just before this receiver records its rollouts."""

    def __init__(self) -> None:
        super().__init__()
        self.first: Callable[[], Awaitable[object]] | None = None

    async def record_rollouts(
        self, requests: Sequence[RolloutRequest], *, worker_id: str, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> list[tuple[Rollout, Attempt]]:
        first, self.first = self.first, None
        if first is not None:
            await first()
        return await super().record_rollouts(requests, worker_id=worker_id, lease_seconds=lease_seconds)


async def test_two_receivers_importing_one_trace_at_once_make_one_rollout() -> None:
    store = _AnotherReceiverFirst()
    ours, theirs = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    _span(ours, "00f067aa0ba902b7", **LLM_ATTRIBUTES)
    _span(theirs, "1111111111111111", **LLM_ATTRIBUTES)
    async with (
        AsgiServer(create_otlp_app(store)) as one,
        AsgiServer(create_otlp_app(store)) as other,
        httpx.AsyncClient(headers={"content-type": "application/x-protobuf"}) as exporter,
    ):
        answers: list[httpx.Response] = []

        async def other_receiver_first() -> None:
            answers.append(await exporter.post(f"{other.url}/v1/traces", content=theirs.SerializeToString()))

        store.first = other_receiver_first
        answers.append(await exporter.post(f"{one.url}/v1/traces", content=ours.SerializeToString()))
    assert [answer.status_code for answer in answers] == [200, 200]
    (rollout,) = await store.list_rollouts()
    assert (rollout.rollout_id, rollout.status) == (f"otlp-{TRACE}", RolloutStatus.SUCCEEDED)
    (attempt,) = await store.list_attempts(rollout.rollout_id)
    spans = await store.query_spans(rollout.rollout_id, attempt.attempt_id)
    assert [span.span_id for span in spans] == ["1111111111111111", "00f067aa0ba902b7"]
