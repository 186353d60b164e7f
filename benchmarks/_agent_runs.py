"""An agent run through relight with given prompts, on tasks, from synchronous code: GEPA's evaluations, held-out tests.

The store, gateway and runner live on an event loop of their own thread, for as long as the ``with``
block: :meth:`AgentRuns.run` publishes the prompts as a resources version, runs one rollout per task
pinned to it, and returns each one's reward (0 for a rollout that failed) and the rollout rendered as
the judge and the optimiser read it. It is the same path a rollout of ``Trainer.fit`` takes, so both
optimisers in ``benchmarks/apo.py`` drive the agent, its model calls and its rewards alike.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType

from pydantic import JsonValue

from relight.agent import Agent
from relight.gateway import Gateway, OpenAIUpstream
from relight.records import RolloutRequest, RolloutStatus
from relight.rewards.render import RenderedRollout, render_rollout
from relight.runners.runner import Runner
from relight.stores.memory import InMemoryStore
from relight.training.search import publish_changed
from relight.transitions.builder import episode_return, last_attempt_spans

__all__ = ["AgentRuns", "Outcome", "mean"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One rollout: its task, its reward and what happened in it."""

    task: JsonValue
    reward: float
    rendered: RenderedRollout
    error: str | None


class AgentRuns:
    """``agent`` against the model at ``base_url``, run through a gateway and a runner; see the module docstring."""

    def __init__(
        self,
        agent: Agent,
        base_url: str,
        model: str,
        *,
        concurrency: int = 16,
        timeout: float = 300.0,
        chars: int = 3000,
    ) -> None:
        self.agent = agent
        self.base_url = base_url
        self.model = model
        self.concurrency = concurrency
        self.timeout = timeout
        self.chars = chars
        self.rollouts = 0
        """Rollouts run so far."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-runs", daemon=True)
        self._ready: Future[None] = Future()
        self._stop: asyncio.Event | None = None
        self._serving: Future[None] | None = None
        self._store: InMemoryStore | None = None
        self._gateway: Gateway | None = None

    def __enter__(self) -> AgentRuns:
        self._thread.start()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        self._ready.result(timeout=120)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        assert self._stop is not None
        assert self._serving is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._serving.result(timeout=120)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def run(self, tasks: Sequence[JsonValue], prompts: Mapping[str, str]) -> list[Outcome]:
        """Each task run once with ``prompts`` published; blocks until all have ended."""
        return asyncio.run_coroutine_threadsafe(self._run(tasks, prompts), self._loop).result()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._store = InMemoryStore()
        async with Gateway(self._store, [OpenAIUpstream(self.base_url)], model=self.model) as gateway:
            self._gateway = gateway
            runner = Runner(
                self.agent,
                self._store,
                gateway_url=gateway.url,
                gateway=gateway,
                model=self.model,
                concurrency=self.concurrency,
                timeout=self.timeout,
            )
            running = asyncio.create_task(runner.run())
            self._ready.set_result(None)
            await self._stop.wait()
            runner.stop()
            await running
        await self._store.close()

    async def _run(self, tasks: Sequence[JsonValue], prompts: Mapping[str, str]) -> list[Outcome]:
        assert self._store is not None
        assert self._gateway is not None
        store = self._store
        version = (await publish_changed(store, dict(prompts))).version
        requests = [RolloutRequest(input=task, resources_version=version, max_attempts=1) for task in tasks]
        rollouts = await store.enqueue(requests)
        finished = await store.wait([r.rollout_id for r in rollouts])
        await self._gateway.flush()
        self.rollouts += len(finished)
        outcomes: list[Outcome] = []
        for rollout in finished:
            spans = await last_attempt_spans(store, rollout.rollout_id)
            succeeded = rollout.status is RolloutStatus.SUCCEEDED
            reward = (episode_return(spans) or 0.0) if succeeded else 0.0
            error = None if succeeded else (rollout.error or "failed").strip().splitlines()[-1]
            rendered = render_rollout(rollout.rollout_id, spans, max_chars=self.chars)
            outcomes.append(Outcome(rollout.input, reward, rendered, error))
        return outcomes


def mean(outcomes: Sequence[Outcome]) -> float:
    """The mean reward of ``outcomes`` (0 for none)."""
    return sum(outcome.reward for outcome in outcomes) / len(outcomes) if outcomes else 0.0
