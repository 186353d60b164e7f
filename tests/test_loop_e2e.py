"""The whole loop on loopback: Trainer.fit → runner → real openai client → gateway → scripted vLLM-style
upstream → store → transitions → algorithm. Every transition must carry exactly what the upstream sent."""

import io
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from rich.console import Console

from relight import Trainer
from relight.agent import Agent
from relight.records import AttemptStatus, Mode, RolloutStatus
from relight.runners.runner import is_worker_of
from relight.scripted import ScriptedUpstream, decode
from relight.stores.memory import InMemoryStore
from relight_testing.agents import CALLS, three_calls, three_calls_async
from relight_testing.algorithms import RecordingAlgorithm

TASKS_PER_STEP, SAMPLES, STEPS = 25, 4, 2  # 200 rollouts of 3 calls each


@pytest.mark.parametrize(("agent", "stream"), [(three_calls, False), (three_calls, True), (three_calls_async, True)])
async def test_200_rollouts_through_the_loop_carry_exactly_what_the_upstream_sent(
    agent: Agent, stream: bool, tmp_path: Path
) -> None:
    store = InMemoryStore()
    tasks: list[JsonValue] = [{"text": f"task-{i}", "stream": stream} for i in range(TASKS_PER_STEP * STEPS)]
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream, resources={"prompt": "Repeat the last message."})
        trainer = Trainer(
            algorithm,
            store=store,
            concurrency=16,
            batch_size=TASKS_PER_STEP,
            n_samples=SAMPLES,
            checkpoint_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        history = await trainer.afit(agent, tasks)

    def exact(prompt: list[int], response: list[int], logprobs: list[float] | None) -> tuple[Any, ...]:
        return (tuple(prompt), tuple(response), tuple(logprobs or ()))

    sent = Counter(exact(s.prompt_token_ids, s.token_ids, s.logprobs) for s in upstream.served)
    received = Counter(
        exact(t.prompt_token_ids, t.response_token_ids, t.response_logprobs) for b in algorithm.batches for t in b
    )
    assert len(upstream.served) == TASKS_PER_STEP * STEPS * SAMPLES * CALLS
    assert received == sent
    assert [len(batch) for batch in algorithm.batches] == [TASKS_PER_STEP * SAMPLES * CALLS] * STEPS
    for version, batch in enumerate(algorithm.batches):
        steps: dict[str, list[int]] = {}
        for transition in batch:
            rollout = await store.get_rollout(transition.rollout_id)
            assert isinstance(rollout.input, dict)
            text = rollout.input["text"]
            assert decode(transition.prompt_token_ids).endswith(f"{text} #{transition.step}\n<|assistant|>")
            assert decode(transition.response_token_ids) == f"{text} #{transition.step}"
            assert (transition.policy_version, transition.reward) == (version, 1.0)
            steps.setdefault(transition.rollout_id, []).append(transition.step)
        assert len(steps) == TASKS_PER_STEP * SAMPLES
        assert all(sorted(s) == list(range(CALLS)) for s in steps.values())
        assert len({t.group_id for t in batch}) == TASKS_PER_STEP
    assert [m["reward_mean"] for m in history] == [1.0] * STEPS
    assert (tmp_path / f"step-{STEPS}" / "version").read_text() == str(STEPS)
    assert (await store.get_resources()).items == {
        "model": "scripted",
        "policy_version": 2,
        "relight.transitions": {
            "roles": None,
            "include_failed": False,
            "include_inexact": False,
        },  # how the run judged calls, for readers
        "prompt": "Repeat the last message.",
    }


async def test_an_agent_that_raises_is_retried_then_fails_and_yields_no_transitions() -> None:
    store = InMemoryStore()
    tasks: list[JsonValue] = [{"text": "fine"}, {"text": "doomed", "fail": True}]
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm, store=store, batch_size=2, n_samples=1, max_attempts=2, console=Console(file=io.StringIO())
        )
        (metrics,) = await trainer.afit(three_calls, tasks)
    (batch,) = algorithm.batches
    rollouts = {r.input["text"]: r for r in await store.list_rollouts(mode=Mode.TRAIN) if isinstance(r.input, dict)}
    assert rollouts["doomed"].status is RolloutStatus.FAILED
    attempts = await store.list_attempts(rollouts["doomed"].rollout_id)
    assert [a.status for a in attempts] == [AttemptStatus.FAILED, AttemptStatus.FAILED]
    assert all("RuntimeError: the agent gave up on 'doomed'" in (a.error or "") for a in attempts)
    assert all("Traceback (most recent call last)" in (a.error or "") for a in attempts)
    assert {t.rollout_id for t in batch} == {rollouts["fine"].rollout_id}
    assert (metrics["rollouts"], metrics["rollouts_failed"], metrics["transitions"]) == (2, 1, CALLS)


async def test_validation_runs_before_training_on_schedule_and_is_reported(tmp_path: Path) -> None:
    output = io.StringIO()
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            RecordingAlgorithm(upstream),
            batch_size=1,
            n_samples=2,
            val_every=2,
            console=Console(file=output, width=300),
        )
        history = await trainer.afit(three_calls_async, [{"text": "a"}, {"text": "b"}, {"text": "c"}], [{"text": "v"}])
    validations = [(m["step"], m["val_reward_mean"]) for m in history if "val_reward_mean" in m]
    assert validations == [(0, 1.0), (2, 1.0), (3, 1.0)]
    assert "policy_version=3" in output.getvalue()


def test_fit_without_an_algorithm_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match=r"fit\(\) needs a Trainer\(algorithm=...\)"):
        Trainer().fit(three_calls, [{"text": "a"}])


async def test_fit_with_runner_processes_sharing_the_store_over_http() -> None:
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm, n_runners=2, concurrency=4, batch_size=6, n_samples=2, console=Console(file=io.StringIO())
        )
        (metrics,) = await trainer.afit(three_calls, [{"text": f"t{i}"} for i in range(6)])
    (batch,) = algorithm.batches
    assert (metrics["rollouts"], metrics["rollouts_failed"], len(batch)) == (12, 0, 12 * CALLS)
    assert {t.reward for t in batch} == {1.0}


async def test_fit_with_one_runner_process_apart_from_the_trainer() -> None:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=store,
            runner_process=True,
            concurrency=4,
            batch_size=6,
            n_samples=2,
            console=Console(file=io.StringIO()),
        )
        (metrics,) = await trainer.afit(three_calls_async, [{"text": f"t{i}"} for i in range(6)])
    (batch,) = algorithm.batches
    assert (metrics["rollouts"], metrics["rollouts_failed"], len(batch)) == (12, 0, 12 * CALLS)
    workers = {a.worker_id for r in await store.list_rollouts() for a in await store.list_attempts(r.rollout_id)}
    assert len(workers) == 1
    assert not any(is_worker_of(worker, os.getpid()) for worker in workers)  # the agent ran in another process
