"""Runner processes sharing one store over HTTP; one of them killed with SIGKILL in the middle of its rollouts."""

import asyncio

from relight import semconv
from relight.records import AttemptStatus, RolloutStatus, SpanKind
from relight.scripted import first_calls_reach
from relight.transitions.builder import TransitionBuilder
from relight_testing.agents import CALLS
from relight_testing.runners import Shared


async def test_rollouts_spread_over_runner_processes(shared: Shared) -> None:
    ids = await shared.enqueue([{"text": f"t{i}"} for i in range(12)])
    runners = shared.runners(2, concurrency=4)
    runners.start()
    try:
        rollouts = await shared.finish(ids)
    finally:
        await asyncio.to_thread(runners.stop)
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * 12
    workers = {(await shared.store.list_attempts(i))[0].worker_id for i in ids}
    pids = {str(p.pid) for p in runners.processes}
    assert {worker.split("-")[-3] for worker in workers} <= pids
    assert all(p.exitcode == 0 for p in runners.processes)


async def test_a_runner_killed_mid_rollout_loses_nothing(shared: Shared) -> None:
    count = 6
    all_in_flight = first_calls_reach(shared.upstream, count, "hang")
    ids = await shared.enqueue([{"text": f"hang-{i}", "hang_first_attempt": True} for i in range(count)])
    doomed = shared.runners(1, concurrency=count, lease_seconds=1.0)
    doomed.start()
    await all_in_flight.wait()  # every rollout is inside its first attempt, in the doomed process
    doomed.processes[0].kill()
    await asyncio.to_thread(doomed.processes[0].join)
    survivor = shared.runners(1, concurrency=count, lease_seconds=1.0)
    survivor.start()
    try:
        rollouts = await shared.finish(ids)
    finally:
        await asyncio.to_thread(survivor.stop)

    assert doomed.processes[0].exitcode == -9
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * count
    for rollout in rollouts:
        first, second = await shared.store.list_attempts(rollout.rollout_id)
        assert (first.status, second.status) == (AttemptStatus.EXPIRED, AttemptStatus.SUCCEEDED)
        spans = await shared.store.query_spans(rollout.rollout_id, second.attempt_id)
        assert len({span.span_id for span in spans}) == len(spans)
        calls = [span for span in spans if span.kind is SpanKind.LLM]
        assert len({span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in calls}) == len(calls) == CALLS
        assert [s.attributes[semconv.REWARD] for s in spans if s.kind is SpanKind.REWARD] == [1.0]
        lost = await shared.store.query_spans(rollout.rollout_id, first.attempt_id)
        assert [span.kind for span in lost] == [SpanKind.LLM]  # its one call before the kill, kept apart
    transitions = await TransitionBuilder().from_store(shared.store, rollouts)
    assert sorted(t.step for t in transitions) == sorted(list(range(CALLS)) * count)
    assert {t.attempt_id for t in transitions} == {f"{i}-a2" for i in ids}
