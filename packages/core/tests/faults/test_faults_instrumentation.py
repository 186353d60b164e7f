"""relight's own instrumentation made to raise, place by place, inside rollouts: no rollout succeeds without its
reward, and one that fails says why.

The matrix: each place :func:`relight_testing.faults.break_instrumentation` can break (the tracer, the span
processor's on_start and on_end, the span batcher's submit, write and flush, an adapter's role hook, reward
emission), with the reward returned and emitted (after the fault has struck), for a runner in the trainer's
process (sharing the gateway's process, as ``Trainer(n_runners=1)`` runs it) and in a runner process of its own.
Where the failing part is only a side job (a tracer, a processor hook, a role hook) the reward takes its own path
and the rollout succeeds with it; where spans may be lost (the batcher broken) or the reward could not be recorded,
the attempt fails with the reason.
"""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from relight._internal.server import AsgiServer
from relight.gateway import Gateway
from relight.records import AttemptStatus, Rollout, RolloutRequest, RolloutStatus
from relight.runners.processes import RunnerProcesses
from relight.runners.runner import Runner
from relight.scripted import ScriptedUpstream
from relight.stores.http.server import create_app
from relight.stores.memory import InMemoryStore
from relight.tracing.hook_failures import hook_failures
from relight.transitions.builder import episode_return
from relight_testing.agents import INSTRUMENTED_REWARD, instrumented
from relight_testing.faults import INSTRUMENTATION_FAULTS, mend_instrumentation

RESCUED = {"tracer", "processor.on_start", "processor.on_end", "role_hook"}
"""Faults of a side job: the reward takes its own path and the rollout succeeds with it, in any runner."""
FAILED_BECAUSE = {
    "batcher.write": "could not be written to the store",
    "batcher.flush": "span batcher",
    "reward_emission": "reward emission is broken",
}
"""Faults that may cost the attempt spans or its reward: it fails, and its error says this."""

CASES = [(fault, reward) for fault in INSTRUMENTATION_FAULTS for reward in ("returned", "emitted")]


@dataclass
class Rig:
    store: InMemoryStore
    gateway: Gateway


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    store = InMemoryStore()
    try:
        async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
            yield Rig(store, gateway)
    finally:
        mend_instrumentation()


async def enqueue(rig: Rig, fault: str, reward: str) -> Rollout:
    (rollout,) = await rig.store.enqueue(
        [RolloutRequest(input={"text": "hi", "fault": fault, "reward": reward}, max_attempts=2)]
    )
    return rollout


async def check(rig: Rig, rollout: Rollout, fault: str, *, rescued: bool) -> None:
    """The invariant (succeeded only with the reward stored; failed only with a reason), then this fault's outcome."""
    (finished,) = await rig.store.wait([rollout.rollout_id], timeout=60)
    attempts = await rig.store.list_attempts(rollout.rollout_id)
    assert finished.status in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED), finished
    if finished.status is RolloutStatus.SUCCEEDED:
        (won,) = [a for a in attempts if a.status is AttemptStatus.SUCCEEDED]
        assert episode_return(await rig.store.query_spans(rollout.rollout_id, won.attempt_id)) == INSTRUMENTED_REWARD
    errors = [a.error or "" for a in attempts if a.status is not AttemptStatus.SUCCEEDED]
    assert all(errors), attempts
    if rescued:
        assert finished.status is RolloutStatus.SUCCEEDED, errors
    elif fault in FAILED_BECAUSE:
        assert finished.status is RolloutStatus.FAILED
        assert all(FAILED_BECAUSE[fault] in error for error in errors), errors


@pytest.mark.parametrize(("fault", "reward"), CASES, ids=[f"{f}-{r}" for f, r in CASES])
async def test_a_runner_in_the_gateways_process(rig: Rig, fault: str, reward: str) -> None:
    before = sum(hook_failures().values())
    runner = Runner(instrumented, rig.store, gateway_url=rig.gateway.url, model="scripted", gateway=rig.gateway)
    running = asyncio.create_task(runner.run())
    try:
        rollout = await enqueue(rig, fault, reward)
        await check(rig, rollout, fault, rescued=fault in RESCUED)
    finally:
        runner.stop()
        await running
    assert sum(hook_failures().values()) > before  # the fault struck, and was counted


@pytest.mark.parametrize("fault", INSTRUMENTATION_FAULTS)
async def test_a_runner_process(rig: Rig, fault: str) -> None:
    async with AsgiServer(create_app(rig.store, max_poll_seconds=1.0)) as server:
        processes = RunnerProcesses(1, instrumented, server.url, gateway_url=rig.gateway.url, model="scripted")
        processes.start()
        try:
            rollouts = [await enqueue(rig, fault, reward) for reward in ("returned", "emitted")]
            # Only the runner's batcher breaks here, not the gateway's: a reward it did not take is written directly.
            for rollout in rollouts:
                await check(rig, rollout, fault, rescued=fault in RESCUED | {"batcher.submit"})
        finally:
            await asyncio.to_thread(processes.stop)
