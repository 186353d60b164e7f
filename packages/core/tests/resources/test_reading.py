"""An agent reads the resources version its rollout is pinned to, in this process or another; each read is recorded."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from rich.console import Console

import relight
from relight import semconv
from relight.agent import LLM, Agent
from relight.errors import ConfigError
from relight.gateway import Gateway
from relight.records import Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream, ScriptRequest
from relight.stores.memory import InMemoryStore
from relight.training.trainer import Trainer
from relight_testing.agents import DEFAULT_SYSTEM_PROMPT, prompted, prompted_async
from relight_testing.runners import Shared


def says_its_system_prompt(request: ScriptRequest) -> str:
    """The scripted model answers with the system prompt it was sent: the reply shows what the agent read."""
    return request.system


@dataclass
class Loop:
    store: InMemoryStore
    gateway: Gateway

    async def run(self, agent: Agent, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        runner = Runner(agent, self.store, gateway_url=self.gateway.url, model="scripted")
        running = asyncio.create_task(runner.run())
        rollouts = await self.store.enqueue(requests)
        finished = await self.store.wait([r.rollout_id for r in rollouts], timeout=60)
        runner.stop()
        await running
        await self.gateway.flush()
        return finished


@pytest.fixture
async def loop() -> AsyncIterator[Loop]:
    store = InMemoryStore()
    async with ScriptedUpstream(says_its_system_prompt) as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield Loop(store, gateway)


def task(answer: str) -> dict[str, str]:
    return {"question": "What is your system prompt?", "answer": answer}


async def reads(store: InMemoryStore, rollout: Rollout) -> list[dict[str, Any]]:
    """What the rollout's resource annotations say: one a resource read."""
    spans: list[Span] = await store.query_spans(rollout.rollout_id)
    return [
        json.loads(str(span.attributes[semconv.ANNOTATION]))
        for span in spans
        if span.kind is SpanKind.ANNOTATION and semconv.RESOURCE_NAME in span.attributes
    ]


async def returns(store: InMemoryStore, rollouts: Sequence[Rollout]) -> list[float]:
    from relight.transitions.builder import episode_return, last_attempt_spans

    return [episode_return(await last_attempt_spans(store, r.rollout_id)) or 0.0 for r in rollouts]


@pytest.mark.parametrize("agent", [prompted, prompted_async], ids=["llm.resources", "relight.resource"])
async def test_a_rollout_reads_the_version_it_is_pinned_to_not_the_latest(loop: Loop, agent: Agent) -> None:
    await loop.store.publish_resources({"system_prompt": "You are version zero."})
    await loop.store.publish_resources({"system_prompt": "You are version one."})
    rollouts = await loop.run(
        agent,
        [
            RolloutRequest(input=task("You are version zero."), resources_version=0),
            RolloutRequest(input=task("You are version one."), resources_version=1),
        ],
    )
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * 2
    assert await returns(loop.store, rollouts) == [1.0, 1.0]
    assert await reads(loop.store, rollouts[0]) == [{"resource": "system_prompt", "version": 0, "source": "published"}]
    assert await reads(loop.store, rollouts[1]) == [{"resource": "system_prompt", "version": 1, "source": "published"}]


@pytest.mark.parametrize("agent", [prompted, prompted_async], ids=["llm.resources", "relight.resource"])
async def test_the_default_stands_in_where_nothing_is_published(loop: Loop, agent: Agent) -> None:
    await loop.store.publish_resources({"other_prompt": "not this one"})
    rollouts = await loop.run(
        agent,
        [
            RolloutRequest(input=task(DEFAULT_SYSTEM_PROMPT)),
            RolloutRequest(input=task(DEFAULT_SYSTEM_PROMPT), resources_version=0),
        ],
    )
    assert await returns(loop.store, rollouts) == [1.0, 1.0]
    assert await reads(loop.store, rollouts[0]) == [{"resource": "system_prompt", "version": None, "source": "default"}]
    assert await reads(loop.store, rollouts[1]) == [{"resource": "system_prompt", "version": 0, "source": "default"}]


@relight.rollout
def reads_twice_and_more(task: dict[str, Any], llm: LLM) -> float:
    """Reads the same prompt three ways, asks whether another is there, and lists the names."""
    first = llm.resources["system_prompt"]
    second = llm.resources.get("system_prompt")
    third = relight.resource("system_prompt", default="unused")
    assert first == second == third
    assert "absent" not in llm.resources
    assert sorted(llm.resources) == ["system_prompt"]
    with pytest.raises(KeyError, match="no resource 'absent' in resources version 0"):
        llm.resources["absent"]
    with pytest.raises(TypeError, match="published as a str"):
        relight.resource("system_prompt", default=3)
    return 1.0


async def test_each_resource_is_recorded_once_per_attempt_and_only_when_read(loop: Loop) -> None:
    await loop.store.publish_resources({"system_prompt": "hello"})
    (rollout,) = await loop.run(reads_twice_and_more, [RolloutRequest(input={}, resources_version=0, max_attempts=1)])
    assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
    assert await reads(loop.store, rollout) == [{"resource": "system_prompt", "version": 0, "source": "published"}]


async def test_a_version_the_store_lacks_fails_the_attempt_instead_of_running_on_defaults(loop: Loop) -> None:
    (rollout,) = await loop.run(prompted, [RolloutRequest(input=task("x"), resources_version=7, max_attempts=1)])
    assert rollout.status is RolloutStatus.FAILED
    assert "resources version 7" in str(rollout.error)
    assert await reads(loop.store, rollout) == []


def test_outside_a_rollout_the_default_is_returned_and_no_default_is_an_error() -> None:
    assert relight.resource("system_prompt", default="mine") == "mine"
    with pytest.raises(KeyError, match="outside a rollout"):
        relight.resource("system_prompt")


async def test_runner_processes_read_the_resources_of_each_attempt_from_the_store(shared: Shared) -> None:
    shared.upstream.script = says_its_system_prompt
    await shared.store.publish_resources({"system_prompt": "Across processes."})
    processes = shared.runners(1, agent=prompted)
    processes.start()
    try:
        (rollout,) = await shared.store.enqueue([RolloutRequest(input=task("Across processes."), resources_version=0)])
        (done,) = await shared.finish([rollout.rollout_id])
    finally:
        await asyncio.to_thread(processes.stop)
    assert done.status is RolloutStatus.SUCCEEDED, done.error
    assert await returns(shared.store, [done]) == [1.0]
    assert await reads(shared.store, done) == [{"resource": "system_prompt", "version": 0, "source": "published"}]


async def test_dev_publishes_the_trainers_resources_pins_its_rollouts_and_shows_what_was_read() -> None:
    store, output = InMemoryStore(), io.StringIO()
    trainer = Trainer(store=store, resources={"system_prompt": "Dev prompt."}, console=Console(file=output, width=200))
    async with ScriptedUpstream(says_its_system_prompt) as upstream:
        (result,) = await trainer.adev(prompted_async, [task("Dev prompt.")], base_url=upstream.base_url, model="m")
        (again,) = await trainer.adev(prompted_async, [task("Dev prompt.")], base_url=upstream.base_url, model="m")
        plain = Trainer(store=store, console=Console(file=io.StringIO()))
        (default,) = await plain.adev(
            prompted_async, [task(DEFAULT_SYSTEM_PROMPT)], base_url=upstream.base_url, model="m"
        )
    assert (result.reward, result.rollout.resources_version, result.resources) == (1.0, 0, {"system_prompt": 0})
    assert again.rollout.resources_version == 0, "the same resources are not published twice"
    assert (default.reward, default.rollout.resources_version, default.resources) == (
        1.0,
        None,
        {"system_prompt": None},
    )
    assert "system_prompt v0" in output.getvalue()


def test_a_resource_named_like_an_item_the_run_publishes_is_refused() -> None:
    with pytest.raises(ConfigError, match="'model'"):
        Trainer(resources={"model": "mine"})
