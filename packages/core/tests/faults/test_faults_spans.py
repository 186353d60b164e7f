"""An attempt finishes only once all its spans are in the store, the gateway's included; spans that cannot be
written fail it (to be retried) instead of a success with a hole. And a load test through the HTTP store."""

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relight import semconv
from relight._internal.retry import RetryPolicy
from relight._internal.server import AsgiServer
from relight.agent import LLM, rollout
from relight.gateway import Gateway
from relight.records import AttemptStatus, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.processes import RunnerProcesses
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream
from relight.stores.http import HttpStore
from relight.stores.http.server import create_app
from relight.stores.memory import InMemoryStore
from relight.tracing import otel as tracing
from relight.tracing.context import current_attempt
from relight_testing.agents import CALLS, SPANS, many_spans_async, three_calls_async
from relight_testing.faults import DroppingProxy, StoreServerProcess


@dataclass
class Remote:
    """A store served over HTTP on this loop; the gateway (through a proxy) and the runner reach it only
    through HttpStore."""

    store: InMemoryStore
    url: str
    gateway: Gateway
    gateway_proxy: DroppingProxy


@pytest.fixture
async def remote() -> AsyncIterator[Remote]:
    store = InMemoryStore()
    async with (
        AsgiServer(create_app(store, max_poll_seconds=1.0)) as server,
        DroppingProxy(server.url) as proxy,
        ScriptedUpstream() as upstream,
    ):
        gateway_store = HttpStore(proxy.url, retry=RetryPolicy(base_seconds=1.0))
        async with Gateway(gateway_store, [upstream.base_url]) as gateway:
            yield Remote(store, server.url, gateway, proxy)
        await gateway_store.close()


async def run(remote: Remote, agent: Any, tasks: list[Any]) -> list[Any]:
    client = HttpStore(remote.url)
    runner = Runner(agent, client, gateway_url=remote.gateway.url, model="scripted", concurrency=8)
    running = asyncio.create_task(runner.run())
    try:
        rollouts = await remote.store.enqueue([RolloutRequest(input=task, max_attempts=2) for task in tasks])
        return await remote.store.wait([r.rollout_id for r in rollouts], timeout=120)
    finally:
        runner.stop()
        await running
        await client.close()


async def test_a_reader_never_sees_a_finished_attempt_without_its_llm_spans(remote: Remote) -> None:
    remote.gateway_proxy.drop("/v1/spans", count=3)  # the gateway's span writes are slow to get through
    finished = await run(remote, three_calls_async, [{"text": f"t{i}"} for i in range(8)])
    for rollout_ in finished:  # read at once: no gateway.flush(), as an export or the CLI would read
        assert rollout_.status is RolloutStatus.SUCCEEDED
        spans = await remote.store.query_spans(rollout_.rollout_id)
        assert [span.kind for span in spans].count(SpanKind.LLM) == CALLS


@rollout
async def refused_on_first_attempt(task: Any, llm: LLM) -> float:
    """Two spans of its own; in a first attempt one carries a value the store refuses (NaN)."""
    attempt = current_attempt()
    first = attempt is not None and attempt.attempt_id.endswith("-a1")
    with tracing.tracer().start_as_current_span("plan"):
        pass
    with tracing.tracer().start_as_current_span("score", attributes={"score": math.nan if first else 0.5}):
        pass
    return 1.0


async def test_an_attempt_whose_spans_are_refused_fails_and_is_retried(remote: Remote) -> None:
    (finished,) = await run(remote, refused_on_first_attempt, ["task"])
    assert finished.status is RolloutStatus.SUCCEEDED
    first, second = await remote.store.list_attempts(finished.rollout_id)
    assert first.status is AttemptStatus.FAILED
    assert first.error is not None
    assert "spans are not all in the store" in first.error
    assert second.status is AttemptStatus.SUCCEEDED
    spans = await remote.store.query_spans(finished.rollout_id, second.attempt_id)
    assert sorted(span.name for span in spans) == ["plan", "reward reward", "score"]


@pytest.mark.slow
async def test_1000_rollouts_of_20_spans_through_the_http_store_with_4_runner_processes(tmp_path: Path) -> None:
    count = 1000
    with StoreServerProcess(tmp_path / "store.db") as server:
        store = HttpStore(server.url)
        try:
            async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
                rollouts = await store.enqueue([RolloutRequest(input={"n": i}) for i in range(count)])
                ids = [r.rollout_id for r in rollouts]
                runners = RunnerProcesses(
                    4, many_spans_async, server.url, gateway_url=gateway.url, model="scripted", concurrency=32
                )
                runners.start()
                try:
                    finished = await store.wait(ids, timeout=400)
                    alive = [process.is_alive() for process in runners.processes]
                finally:
                    await asyncio.to_thread(runners.stop)
            assert alive == [True] * 4
            assert [r.status for r in finished] == [RolloutStatus.SUCCEEDED] * count
            stats = await store.stats()  # one succeeded attempt each (a loaded machine may add retried ones)
            assert stats.attempts_by_status["succeeded"] == count
            assert stats.spans >= SPANS * count
            for rollout_id in ids[::20]:  # and a whole, unduplicated record in a sample of them
                attempts = await store.list_attempts(rollout_id)
                (won,) = [a for a in attempts if a.status is AttemptStatus.SUCCEEDED]
                spans = await store.query_spans(rollout_id, won.attempt_id)
                assert len(spans) == len({s.span_id for s in spans}) == SPANS
                assert [s.attributes[semconv.REWARD] for s in spans if s.kind is SpanKind.REWARD] == [1.0]
        finally:
            await store.close()
