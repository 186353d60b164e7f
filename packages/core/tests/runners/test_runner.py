"""Runners drive real agents (the openai client, sync and async) through a real gateway to a scripted upstream."""

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from rich.console import Console

import relight
from relight import semconv
from relight.agent import LLM, Agent
from relight.gateway import Gateway
from relight.records import AttemptStatus, Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.tracing.context import current_attempt
from relight.training.trainer import Trainer


@dataclass
class Loop:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream

    async def run(self, agent: Agent, tasks: Sequence[Any], *, max_attempts: int = 3, **options: Any) -> list[Rollout]:
        runner = Runner(agent, self.store, gateway_url=self.gateway.url, model="scripted", **options)
        running = asyncio.create_task(runner.run())
        rollouts = await self.store.enqueue([RolloutRequest(input=t, max_attempts=max_attempts) for t in tasks])
        finished = await self.store.wait([r.rollout_id for r in rollouts])
        runner.stop()
        await running
        await self.gateway.flush()
        return finished

    async def spans(self, rollout: Rollout, kind: SpanKind) -> list[Span]:
        return [span for span in await self.store.query_spans(rollout.rollout_id) if span.kind is kind]


@pytest.fixture
async def loop() -> AsyncIterator[Loop]:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield Loop(store, gateway, upstream)


@relight.rollout
def sync_agent(task: Any, llm: LLM) -> float:
    seen = current_attempt()
    assert seen is not None
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        reply = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
    assert seen.attempt_id in llm.base_url
    return float(len(reply.choices[0].message.content or ""))


async def test_sync_agent_runs_on_a_thread_in_its_attempt_and_its_reward_is_recorded(loop: Loop) -> None:
    (rollout,) = await loop.run(sync_agent, ["four"])
    assert rollout.status is RolloutStatus.SUCCEEDED
    (reward,) = await loop.spans(rollout, SpanKind.REWARD)
    assert reward.attributes[semconv.REWARD] == 4.0
    (call,) = await loop.spans(rollout, SpanKind.LLM)
    assert call.attempt_id == reward.attempt_id


async def test_async_agent_with_the_api_key_and_emitted_rewards(loop: Loop) -> None:
    @relight.rollout
    async def agent(task: Any, llm: LLM) -> None:
        root = llm.base_url.split("/rollouts/")[0]
        async with openai.AsyncOpenAI(base_url=f"{root}/v1", api_key=llm.api_key) as client:
            for step in range(2):
                await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
                relight.emit_reward(step + 0.5, name=f"step{step}")

    rollouts = await loop.run(agent, ["a", "b"])
    for rollout in rollouts:
        assert rollout.status is RolloutStatus.SUCCEEDED
        assert [s.attributes[semconv.REWARD] for s in await loop.spans(rollout, SpanKind.REWARD)] == [0.5, 1.5]
        assert len(await loop.spans(rollout, SpanKind.LLM)) == 2


async def test_agent_that_raises_fails_each_attempt_with_its_traceback_until_the_rollout_fails(loop: Loop) -> None:
    @relight.rollout
    def agent(task: Any, llm: LLM) -> float:
        raise RuntimeError(f"cannot solve {task}")

    (rollout,) = await loop.run(agent, ["x"], max_attempts=3)
    attempts = await loop.store.list_attempts(rollout.rollout_id)
    assert rollout.status is RolloutStatus.FAILED
    assert [a.status for a in attempts] == [AttemptStatus.FAILED] * 3
    assert all("Traceback" in (a.error or "") and "RuntimeError: cannot solve x" in (a.error or "") for a in attempts)
    assert "cannot solve x" in (rollout.error or "")


async def test_a_reward_that_is_not_a_number_fails_the_attempt(loop: Loop) -> None:
    @relight.rollout
    async def agent(task: Any, llm: LLM) -> Any:
        return "good"

    (rollout,) = await loop.run(agent, ["x"], max_attempts=1)
    assert rollout.status is RolloutStatus.FAILED
    assert "return a float reward" in (rollout.error or "")


async def test_an_attempt_past_its_timeout_times_out(loop: Loop) -> None:
    never = asyncio.Event()

    @relight.rollout
    async def agent(task: Any, llm: LLM) -> float:
        await never.wait()
        return 1.0

    (rollout,) = await loop.run(agent, ["x"], max_attempts=2, timeout=0.05)
    attempts = await loop.store.list_attempts(rollout.rollout_id)
    assert [a.status for a in attempts] == [AttemptStatus.TIMED_OUT] * 2
    assert "timeout of 0.05 s" in (attempts[0].error or "")


async def test_concurrency_is_bounded(loop: Loop) -> None:
    running, peak, full = 0, 0, asyncio.Event()

    @relight.rollout
    async def agent(task: Any, llm: LLM) -> float:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 4:
            full.set()
        await full.wait()
        running -= 1
        return 0.0

    rollouts = await loop.run(agent, list(range(20)), concurrency=4)
    assert all(r.status is RolloutStatus.SUCCEEDED for r in rollouts)
    assert peak == 4


class CountingAgent(Agent):
    """The base-class way: a sync method, state on the instance."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: list[Any] = []

    def rollout(self, task: Any, llm: LLM) -> float:
        with self.lock:
            self.tasks.append(task)
        return 1.0


async def test_agent_subclass(loop: Loop) -> None:
    agent = CountingAgent()
    rollouts = await loop.run(agent, [1, 2, 3])
    assert sorted(agent.tasks) == [1, 2, 3]
    assert all(r.status is RolloutStatus.SUCCEEDED for r in rollouts)


def test_dev_runs_each_task_once_and_prints_a_table() -> None:
    @relight.rollout
    def agent(task: Any, llm: LLM) -> float:
        if task == "crash":
            raise ValueError("no such task")
        with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
            for _ in range(3):
                client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
        return 1.0 if task == "good" else 0.0

    output = io.StringIO()
    trainer = Trainer(console=Console(file=output, width=200), max_attempts=1)
    with ScriptedUpstream() as upstream:
        results = trainer.dev(agent, ["good", "bad", "crash"], base_url=upstream.base_url, model="scripted")
    assert [(r.rollout.input, r.reward, r.calls) for r in results] == [
        ("good", 1.0, 3),
        ("bad", 0.0, 3),
        ("crash", None, 0),
    ]
    assert [r.rollout.status for r in results] == [
        RolloutStatus.SUCCEEDED,
        RolloutStatus.SUCCEEDED,
        RolloutStatus.FAILED,
    ]
    table = output.getvalue()
    assert "relight dev" in table
    assert "ValueError: no such task" in table
    assert "1.000" in table
    assert [(r.trainable_calls, r.retokenized_calls, r.untrainable_calls) for r in results[:2]] == [(3, 0, 0)] * 2
    assert "all 3 tasks: 6 trainable" in table


def test_dev_shows_calls_recorded_without_token_ids_as_untrainable() -> None:
    @relight.rollout
    def agent(task: Any, llm: LLM) -> float:
        with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
            client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
        return 1.0

    output = io.StringIO()
    trainer = Trainer(console=Console(file=output, width=200), max_attempts=1)
    with ScriptedUpstream() as upstream:  # asked for no ids, it gives none; "scripted" has no local tokenizer
        (result,) = trainer.dev(agent, ["hi"], base_url=upstream.base_url, model="scripted", vllm=False)
    assert (result.calls, result.trainable_calls, result.untrainable_calls) == (1, 0, 1)
    assert "1 untrainable" in output.getvalue()


async def test_heartbeats_keep_an_attempt_alive_past_its_lease(loop: Loop) -> None:
    @relight.rollout
    async def agent(task: Any, llm: LLM) -> float:
        await asyncio.sleep(1.0)  # the work being timed: five leases long
        return 1.0

    (rollout,) = await loop.run(agent, ["x"], lease_seconds=0.2)
    (attempt,) = await loop.store.list_attempts(rollout.rollout_id)
    assert attempt.status is AttemptStatus.SUCCEEDED


async def test_an_attempt_whose_lease_is_lost_is_abandoned_and_its_agent_cancelled(loop: Loop) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @relight.rollout
    async def agent(task: Any, llm: LLM) -> float:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return 1.0

    runner = Runner(agent, loop.store, gateway_url=loop.gateway.url, model="scripted", lease_seconds=0.3)
    running = asyncio.create_task(runner.run())
    (rollout,) = await loop.store.enqueue([RolloutRequest(input="x")])
    await started.wait()
    await loop.store.cancel([rollout.rollout_id])
    await cancelled.wait()
    runner.stop()
    stats = await running
    assert (stats.lost, stats.succeeded, stats.failed) == (1, 0, 0)
    (attempt,) = await loop.store.list_attempts(rollout.rollout_id)
    assert attempt.status is AttemptStatus.CANCELLED


async def test_two_runners_in_one_process_keep_their_own_spans_when_the_later_one_stops_first() -> None:
    """The process has one span processor: each runner's attempts still reach its own store, and a runner that
    stops takes only its own batcher away (a replay or a second trainer beside a running one)."""
    release = asyncio.Event()
    started = asyncio.Event()

    @relight.rollout
    async def waits(task: Any, llm: LLM) -> float:
        started.set()
        await release.wait()
        with relight.tracing.tracer().start_as_current_span(f"step of {task}"):
            pass
        return 1.0

    @relight.rollout
    async def quick(task: Any, llm: LLM) -> float:
        with relight.tracing.tracer().start_as_current_span(f"step of {task}"):
            pass
        return 1.0

    first, second = InMemoryStore(), InMemoryStore()
    async with ScriptedUpstream() as upstream, Gateway(first, [upstream.base_url]) as gateway:
        early = Runner(waits, first, gateway_url=gateway.url, model="scripted")
        running_early = asyncio.create_task(early.run())
        (slow,) = await first.enqueue([RolloutRequest(input="slow")])
        await started.wait()
        late = Runner(quick, second, gateway_url=gateway.url, model="scripted")
        running_late = asyncio.create_task(late.run())
        (fast,) = await second.enqueue([RolloutRequest(input="fast")])
        await second.wait([fast.rollout_id])
        late.stop()
        await running_late
        release.set()
        (ended,) = await first.wait([slow.rollout_id])
        early.stop()
        await running_early
    assert ended.status is RolloutStatus.SUCCEEDED
    assert [s.name for s in await first.query_spans(slow.rollout_id) if s.name.startswith("step")] == ["step of slow"]
    assert [s.name for s in await second.query_spans(fast.rollout_id) if s.name.startswith("step")] == ["step of fast"]
