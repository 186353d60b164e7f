"""Transport faults between a runner and the HTTP store: one dropped connection at each store call.

A real proxy (relight_testing.faults.DroppingProxy) closes the connection of one request, either
before the server sees it or after the server has acted and answered (the reply is lost). The run
must complete with nothing lost and nothing done twice: one attempt per rollout, its spans whole.
"""

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from relight import semconv
from relight._internal.retry import RetryPolicy
from relight._internal.server import CLIENT_KEEP_ALIVE_SECONDS, SERVER_KEEP_ALIVE_SECONDS, AsgiServer
from relight.agent import LLM, rollout
from relight.errors import StoreUnavailableError
from relight.gateway import Gateway
from relight.gateway.upstreams import UPSTREAM_KEEP_ALIVE_SECONDS
from relight.records import AttemptStatus, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream
from relight.stores.http import HttpStore
from relight.stores.http.server import create_app, running_server
from relight.stores.memory import InMemoryStore
from relight_testing.faults import DroppingProxy

ROLLOUTS = 3


@dataclass
class Rig:
    store: InMemoryStore
    proxy: DroppingProxy
    gateway: Gateway


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    store = InMemoryStore()
    async with (
        AsgiServer(create_app(store, max_poll_seconds=1.0)) as server,
        DroppingProxy(server.url) as proxy,
        ScriptedUpstream() as upstream,
        Gateway(store, [upstream.base_url]) as gateway,
    ):
        yield Rig(store, proxy, gateway)


def agent_for(proxy: DroppingProxy, wait_for_heartbeat: bool) -> Any:
    @rollout
    async def one_call(task: Any, llm: LLM) -> float:
        async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
        if wait_for_heartbeat:  # keep the attempt running until a heartbeat got through the dropped one
            await proxy.answered("/v1/heartbeat").wait()
        return 1.0

    return one_call


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("path", ["/v1/claim", "/v1/heartbeat", "/v1/spans", "/v1/finish"])
async def test_one_dropped_connection_at_a_store_call_costs_nothing(rig: Rig, path: str, when: str) -> None:
    rig.proxy.drop(path, when="before" if when == "before" else "after")
    client = HttpStore(rig.proxy.url, retry=RetryPolicy(base_seconds=0.01))
    agent = agent_for(rig.proxy, wait_for_heartbeat=path == "/v1/heartbeat")
    runner = Runner(agent, client, gateway_url=rig.gateway.url, model="scripted", heartbeat_seconds=0.2)
    running = asyncio.create_task(runner.run())
    try:
        rollouts = await rig.store.enqueue([RolloutRequest(input=f"task {i}", max_attempts=3) for i in range(ROLLOUTS)])
        finished = await rig.store.wait([r.rollout_id for r in rollouts], timeout=60)
    finally:
        runner.stop()
        await running
        await client.close()

    assert rig.proxy.dropped[path] == 1
    assert [r.status for r in finished] == [RolloutStatus.SUCCEEDED] * ROLLOUTS
    assert (runner.stats.succeeded, runner.stats.lost, runner.stats.store_outages) == (ROLLOUTS, 0, 0)
    for rollout_ in finished:
        (attempt,) = await rig.store.list_attempts(rollout_.rollout_id)  # a lost claim reply made no orphan
        assert attempt.status is AttemptStatus.SUCCEEDED
        spans = await rig.store.query_spans(rollout_.rollout_id)
        assert sorted(span.kind.value for span in spans) == ["llm", "reward"]
        assert [s.attributes[semconv.REWARD] for s in spans if s.kind is SpanKind.REWARD] == [1.0]


async def test_the_runner_waits_out_a_store_that_is_away(rig: Rig) -> None:
    """Every claim fails for a while (more than a whole retry budget): the runner keeps going and resumes."""
    rig.proxy.drop("/v1/claim", count=6)
    client = HttpStore(rig.proxy.url, retry=RetryPolicy(attempts=2, base_seconds=0.01))
    agent = agent_for(rig.proxy, wait_for_heartbeat=False)
    runner = Runner(agent, client, gateway_url=rig.gateway.url, model="scripted")
    running = asyncio.create_task(runner.run())
    try:
        rollouts = await rig.store.enqueue([RolloutRequest(input="after the outage")])
        (finished,) = await rig.store.wait([r.rollout_id for r in rollouts], timeout=60)
    finally:
        runner.stop()
        await running
        await client.close()
    assert finished.status is RolloutStatus.SUCCEEDED
    assert runner.stats.store_outages >= 1
    assert rig.proxy.dropped["/v1/claim"] == 6


async def test_an_event_loop_stall_beyond_the_servers_keep_alive_is_harmless() -> None:
    """The client gives up idle connections before the server closes them, so a stall of this loop longer than
    the server's keep-alive never sends a request on a connection the server has closed (no retry allowed)."""
    assert SERVER_KEEP_ALIVE_SECONDS > CLIENT_KEEP_ALIVE_SECONDS
    assert UPSTREAM_KEEP_ALIVE_SECONDS < 5  # vLLM's (uvicorn's) default keep-alive
    store = InMemoryStore()
    with running_server(store, keep_alive_seconds=1.0) as url:
        async with DroppingProxy(url) as proxy:
            client = HttpStore(proxy.url, retry=RetryPolicy(attempts=1), keep_alive_seconds=0.5)
            try:
                await client.enqueue([RolloutRequest(input="before the stall", rollout_id="r1")])
                time.sleep(1.5)  # noqa: ASYNC251  (the stall itself: the loop is blocked while the keep-alive runs out)
                assert (await client.get_rollout("r1")).input == "before the stall"
            finally:
                await client.close()
    assert proxy.connections == 2  # the idle connection was given up, not reused


async def test_a_store_that_stays_away_is_reported_after_the_retry_budget() -> None:
    async with DroppingProxy("http://127.0.0.1:9") as proxy:  # nothing listens on port 9
        client = HttpStore(proxy.url, retry=RetryPolicy(attempts=3, base_seconds=0.01))
        try:
            with pytest.raises(StoreUnavailableError, match="could not reach"):
                await client.stats()
        finally:
            await client.close()
    assert proxy.connections == 3


async def test_a_gateway_whose_store_is_away_answers_503_with_retry_after(rig: Rig) -> None:
    away = HttpStore("http://127.0.0.1:9", retry=RetryPolicy(attempts=1))
    async with Gateway(away, ["http://127.0.0.1:9/v1"]) as gateway, httpx.AsyncClient() as http:
        reply = await http.post(
            f"{gateway.url}/rollouts/r/attempts/a/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    await away.close()
    assert reply.status_code == 503
    assert reply.headers["retry-after"] == "2"
    assert reply.json()["error"]["code"] == "store_unavailable"
