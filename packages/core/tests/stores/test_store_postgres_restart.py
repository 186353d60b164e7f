"""PostgreSQL restarted in the middle of a run: nothing acknowledged is lost and the run goes on."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

import relight
from relight.agent import LLM
from relight.gateway import Gateway
from relight.records import AttemptStatus, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream
from relight_testing.postgres import PostgresServer, postgres_unavailable

_UNAVAILABLE = postgres_unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")

if _UNAVAILABLE is None:
    from relight.stores.postgres import PostgresStore

COUNT = 8
"""Rollouts finished before the restart, and rollouts held in the middle of their attempt across it."""


class Gate:
    """Holds the gated rollouts between their two calls until the restart is over."""

    def __init__(self) -> None:
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.open = asyncio.Event()


def _requests(prefix: str, *, gated: bool) -> list[RolloutRequest]:
    return [RolloutRequest(input={"text": f"{prefix}-{i}", "gated": gated}) for i in range(COUNT)]


@pytest.fixture
async def server() -> AsyncIterator[PostgresServer]:
    server = PostgresServer()
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.close)


async def test_a_postgres_restart_mid_run_loses_nothing(server: PostgresServer) -> None:
    gate = Gate()

    @relight.rollout
    async def agent(task: Any, llm: LLM) -> float:
        async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            ask = {"role": "user", "content": task["text"]}
            await client.chat.completions.create(model=llm.model, messages=[ask])  # type: ignore[list-item]
            if task["gated"]:
                gate.waiting += 1
                if gate.waiting == COUNT:
                    gate.all_waiting.set()
                await gate.open.wait()
            await client.chat.completions.create(model=llm.model, messages=[ask])  # type: ignore[list-item]
        return 1.0

    store = PostgresStore(server.create_database())
    try:
        async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
            runner = Runner(agent, store, gateway_url=gateway.url, model="scripted", concurrency=2 * COUNT)
            running = asyncio.create_task(runner.run())
            before = await store.enqueue(_requests("before", gated=False))
            gated = await store.enqueue(_requests("gated", gated=True))
            acknowledged = await store.wait([r.rollout_id for r in before], timeout=120)
            assert [r.status for r in acknowledged] == [RolloutStatus.SUCCEEDED] * COUNT
            await gateway.flush()
            acknowledged_spans = [await store.query_spans(r.rollout_id) for r in before]
            await asyncio.wait_for(gate.all_waiting.wait(), 120)

            await asyncio.to_thread(server.stop)  # every pooled connection and the listener die
            gate.open.set()  # the gated agents go on and write while the server is down
            await asyncio.to_thread(server.start)
            finished = await store.wait([r.rollout_id for r in gated], timeout=120)
            runner.stop()
            await running
            await gateway.flush()

            assert [r.status for r in finished] == [RolloutStatus.SUCCEEDED] * COUNT
            assert await store.wait([r.rollout_id for r in before]) == acknowledged
            assert [await store.query_spans(r.rollout_id) for r in before] == acknowledged_spans
            for rollout in finished:
                (attempt,) = await store.list_attempts(rollout.rollout_id)  # held its lease across the restart
                assert attempt.status is AttemptStatus.SUCCEEDED
                kinds = [span.kind for span in await store.query_spans(rollout.rollout_id)]
                assert sorted(kinds) == sorted([SpanKind.LLM, SpanKind.LLM, SpanKind.REWARD])
            stats = await store.stats()
            assert stats.spans == 2 * COUNT * 3
            assert stats.extra["retries_since_open"] > 0
            assert runner.stats.succeeded == 2 * COUNT
            assert runner.stats.lost == 0
    finally:
        await store.close()
