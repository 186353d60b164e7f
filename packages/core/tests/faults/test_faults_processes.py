"""Process faults with real processes and signals: hung sync agents and SIGTERM, a store server SIGKILLed and
restarted on its SQLite file, Trainer.fit's runner processes killed (one, then all)."""

import asyncio
import io
import signal
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from rich.console import Console

from relight import Trainer, semconv
from relight.gateway import Gateway
from relight.records import AttemptStatus, Rollout, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.processes import RunnerProcesses
from relight.runners.supervisor import RunnersDiedError
from relight.scripted import ScriptedUpstream, first_calls_reach
from relight.store import Store
from relight.stores.http import HttpStore
from relight_testing.agents import CALLS, three_calls
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.faults import StoreServerProcess
from relight_testing.runners import Shared


async def whole(store: Store, rollout: Rollout) -> None:
    """The rollout succeeded once, and its succeeded attempt's spans are all there, none twice."""
    attempts = await store.list_attempts(rollout.rollout_id)
    (won,) = [a for a in attempts if a.status is AttemptStatus.SUCCEEDED]
    spans = await store.query_spans(rollout.rollout_id, won.attempt_id)
    assert len({span.span_id for span in spans}) == len(spans)
    calls = [span for span in spans if span.kind is SpanKind.LLM]
    assert len({span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in calls}) == len(calls) == CALLS
    assert [s.attributes[semconv.REWARD] for s in spans if s.kind is SpanKind.REWARD] == [1.0]


@pytest.mark.slow
async def test_hung_sync_agents_cost_no_slot_and_sigterm_still_stops_the_runner(shared: Shared) -> None:
    hung = await shared.enqueue([{"text": f"hung-{i}", "hang": True} for i in range(3)], max_attempts=1)
    fine = await shared.enqueue([{"text": f"fine-{i}"} for i in range(6)], max_attempts=1)
    options: dict[str, Any] = {"gateway_url": shared.gateway.url, "model": "scripted", "concurrency": 2}
    timing_out = RunnerProcesses(1, three_calls, shared.store_url, timeout=3.0, **options)
    timing_out.start()
    try:
        finished = await shared.store.wait(hung + fine, timeout=120)
    finally:
        await asyncio.to_thread(timing_out.stop, grace_seconds=60)
    statuses = {r.rollout_id: r.status for r in finished}
    assert [statuses[i] for i in hung] == [RolloutStatus.FAILED] * 3
    assert [statuses[i] for i in fine] == [RolloutStatus.SUCCEEDED] * 6  # a fixed pool of 2 would have run none
    for rollout_id in hung:
        (attempt,) = await shared.store.list_attempts(rollout_id)
        assert attempt.status is AttemptStatus.TIMED_OUT
    assert timing_out.processes[0].exitcode == 0  # its three hung threads did not keep it from exiting

    # No timeout now: SIGTERM must stop a runner whose every agent hangs, within its grace.
    stuck = RunnerProcesses(1, three_calls, shared.store_url, stop_grace_seconds=0.5, **options)
    in_flight = first_calls_reach(shared.upstream, 2, "last")
    last = await shared.enqueue([{"text": f"last-{i}", "hang": True} for i in range(2)], max_attempts=2)
    stuck.start()
    try:
        await in_flight.wait()
    finally:
        await asyncio.to_thread(stuck.stop, grace_seconds=60)
    assert stuck.processes[0].exitcode == 0  # it left by itself, not by SIGKILL after the 60 s
    for rollout_id in last:  # stopped with their agents hung: failed at once, to be retried, not left to expire
        (attempt,) = await shared.store.list_attempts(rollout_id)
        assert (attempt.status, attempt.error) == (AttemptStatus.FAILED, "the runner stopped before the attempt ended")
        assert (await shared.store.get_rollout(rollout_id)).status is RolloutStatus.QUEUED


@pytest.mark.slow
async def test_a_store_server_killed_and_restarted_mid_run_loses_nothing(tmp_path: Path) -> None:
    count = 24
    server = StoreServerProcess(tmp_path / "store.db")
    await asyncio.to_thread(server.start)
    store = HttpStore(server.url)
    runners: RunnerProcesses | None = None
    try:
        async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
            halfway = first_calls_reach(upstream, count // 3, "task")
            requests = [RolloutRequest(input={"text": f"task-{i}"}, max_attempts=3) for i in range(count)]
            ids = [rollout.rollout_id for rollout in await store.enqueue(requests)]
            options: dict[str, Any] = {"gateway_url": gateway.url, "model": "scripted", "concurrency": 4}
            runners = RunnerProcesses(2, three_calls, server.url, **options)
            runners.start()
            await halfway.wait()
            server.kill()
            await asyncio.to_thread(server.start)  # the same file, the same port
            rollouts = await store.wait(ids, timeout=120)
            alive = [process.is_alive() for process in runners.processes]
            await asyncio.to_thread(runners.stop)
            await gateway.flush()
        assert alive == [True, True]  # no runner process gave up on the store
        assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * count
        for rollout in rollouts:
            await whole(store, rollout)
        assert [process.exitcode for process in runners.processes] == [0, 0]
    finally:
        if runners is not None:
            await asyncio.to_thread(runners.stop)
        await store.close()
        await asyncio.to_thread(server.stop)


def _trainer(upstream: ScriptedUpstream, **options: Any) -> Trainer:
    algorithm = RecordingAlgorithm(upstream)
    return Trainer(
        algorithm,
        n_runners=2,
        concurrency=4,
        batch_size=6,
        n_samples=1,
        lease_seconds=60.0,  # a dead runner's attempts are failed at once, not left to expire
        console=Console(file=io.StringIO()),
        **options,
    )


@pytest.mark.slow
async def test_fit_replaces_a_runner_process_killed_mid_rollout(caplog: pytest.LogCaptureFixture) -> None:
    tasks: list[JsonValue] = [{"text": f"t{i}", "die": "first" if i == 0 else None} for i in range(6)]
    async with ScriptedUpstream() as upstream:
        trainer = _trainer(upstream)
        (metrics,) = await trainer.afit(three_calls, tasks)
    assert (metrics["rollouts"], metrics["rollouts_failed"]) == (6, 0)
    assert "died with exit code -9" in caplog.text
    assert "restarted runner process" in caplog.text
    assert f"exit code {-signal.SIGKILL}" in caplog.text


@pytest.mark.slow
async def test_fit_fails_clearly_when_every_runner_process_has_died() -> None:
    tasks: list[JsonValue] = [{"text": f"t{i}", "die": "always"} for i in range(6)]
    async with ScriptedUpstream() as upstream:
        trainer = _trainer(upstream, max_runner_restarts=1, max_attempts=10)
        with pytest.raises(RunnersDiedError, match=r"all 2 runner processes died .* 1 restart"):
            await trainer.afit(three_calls, tasks)
