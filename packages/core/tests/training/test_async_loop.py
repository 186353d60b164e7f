"""Asynchronous training through the real loop: runner, openai client, gateway, scripted upstream, store.

The agent waits a task-given time before each call (its "tool"), so rollouts finish out of order
and updates land while others are mid-episode; the algorithm records every batch it is given and
bumps the policy version, so the i-th batch is the one trained at version i.
"""

import asyncio
import io
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue
from rich.console import Console

from relight import Trainer
from relight.agent import LLM, rollout
from relight.records import Mode, RolloutStatus, Transition
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import last_attempt_spans
from relight.transitions.drops import DropReason, dropped_reason
from relight_testing.algorithms import RecordingAlgorithm

CALLS = 2


@rollout
async def waits_then_calls(task: Mapping[str, Any], llm: LLM) -> float:
    """Before each of its calls, waits the task's ``delays`` (seconds); hangs forever when ``hang`` is set."""
    async with openai.AsyncOpenAI(
        base_url=llm.base_url, api_key=llm.api_key, max_retries=0, http_client=httpx.AsyncClient()
    ) as client:
        for step, delay in enumerate(task["delays"]):
            if task.get("hang"):
                await asyncio.Event().wait()
            await asyncio.sleep(delay)
            messages: Any = [{"role": "user", "content": f"{task['text']} #{step}"}]
            await client.chat.completions.create(model=llm.model, messages=messages)
    return float(task.get("reward", 1.0))


def _trainer(algorithm: RecordingAlgorithm, store: InMemoryStore, **options: Any) -> Trainer:
    options.setdefault("concurrency", 32)
    return Trainer(algorithm, store=store, console=Console(file=io.StringIO()), **options)


async def _fit(tasks: Sequence[JsonValue], **options: Any) -> tuple[list[dict[str, float]], RecordingAlgorithm]:
    with tempfile.TemporaryDirectory() as run_dir:
        async with ScriptedUpstream() as upstream:
            algorithm = RecordingAlgorithm(upstream)
            trainer = _trainer(algorithm, options.pop("store", InMemoryStore()), run_dir=run_dir, **options)
            history = await trainer.afit(waits_then_calls, tasks)
    return history, algorithm


def _tasks(delays: Sequence[Sequence[float]]) -> list[JsonValue]:
    return [{"text": f"task-{i}", "delays": list(d)} for i, d in enumerate(delays)]


def _staleness(algorithm: RecordingAlgorithm, *, versions: Sequence[int] | None = None) -> list[int]:
    """Each trained transition's staleness: the version its batch was trained at less the one that sampled it."""
    at = versions or range(len(algorithm.batches))
    return [
        at[index] - transition.policy_version
        for index, batch in enumerate(algorithm.batches)
        for transition in batch
        if transition.policy_version is not None
    ]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(min_value=0, max_value=2),
    batch_size=st.integers(min_value=1, max_value=3),
    delays=st.lists(st.lists(st.sampled_from([0.0, 0.001, 0.01, 0.05]), min_size=CALLS, max_size=CALLS), min_size=4),
)
def test_staleness_never_exceeds_k_and_groups_are_trained_whole(
    k: int, batch_size: int, delays: list[list[float]]
) -> None:
    history, algorithm = asyncio.run(_fit(_tasks(delays), max_staleness=k, batch_size=batch_size, n_samples=2))
    assert all(0 <= s <= k for s in _staleness(algorithm))
    trained: dict[str, list[Transition]] = {}
    for batch in algorithm.batches:
        groups = {t.group_id for t in batch}
        assert len(groups) <= batch_size
        for group in groups:
            assert group not in trained, "a group was split across batches"
            trained[group] = [t for t in batch if t.group_id == group]
    assert all(len({t.rollout_id for t in group}) == 2 for group in trained.values()), "a group was trained partly"
    dropped = history[-1]["groups_dropped_stale"] + history[-1]["groups_aged_out"] if history else len(delays)
    assert len(trained) + dropped == len(delays)
    assert all(m["staleness_max"] <= k for m in history)


async def test_max_staleness_0_gives_the_synchronous_history_exactly() -> None:
    delays = [[0.02 * (i % 3), 0.0] for i in range(6)]

    def key(t: Transition) -> tuple[Any, ...]:
        return (t.group_id, t.step, t.prompt_token_ids, t.response_token_ids, t.response_logprobs, t.policy_version)

    runs = [await _fit(_tasks(delays), max_staleness=k, batch_size=2, n_samples=3) for k in (None, 0)]
    (sync_history, sync), (async_history, asynchronous) = runs
    assert [[key(t) for t in batch] for batch in asynchronous.batches] == [[key(t) for t in b] for b in sync.batches]
    shared = ("step", "loss", "policy_version", "rollouts", "rollouts_failed", "transitions", "reward_mean", "epoch")
    assert [{n: m[n] for n in shared} for m in async_history] == [{n: m[n] for n in shared} for m in sync_history]
    assert all(m["staleness_max"] == 0 and m["groups_dropped_stale"] == 0 for m in async_history)


async def test_stale_groups_are_dropped_whole_counted_and_marked_in_the_store(tmp_path: Path) -> None:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = _StaleMaker(upstream, store)
        trainer = _trainer(algorithm, store, max_staleness=1, batch_size=1, n_samples=2, run_dir=tmp_path)
        history = await trainer.afit(waits_then_calls, _tasks([[0.0, 0.0]] * 4))
    # g0 is trained at v0 while g1 (admitted beside it) finishes; that update lands at v2, so g1 is
    # two versions behind and dropped; g2 and g3, admitted after it at v2, are trained at v2 and v3.
    assert [m["groups_dropped_stale"] for m in history] == [0, 1, 1]
    assert history[-1]["transitions_dropped_stale"] == 2 * CALLS
    trained = [{t.group_id for t in batch} for batch in algorithm.batches]
    assert trained[0] == {"step1-task0"}
    assert len(trained) == 3
    assert sorted(group for batch in trained[1:] for group in batch) == ["step3-task0", "step4-task0"]
    assert all(0 <= s <= 1 for s in _staleness(algorithm, versions=[0, 2, 3]))
    for r in await store.list_rollouts(mode=Mode.TRAIN):
        reason = dropped_reason(await last_attempt_spans(store, r.rollout_id))
        assert reason is (DropReason.STALENESS if r.group_id == "step2-task0" else None)


async def test_a_stale_group_can_be_sampled_again_instead(tmp_path: Path) -> None:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = _StaleMaker(upstream, store)
        trainer = _trainer(
            algorithm, store, max_staleness=1, batch_size=1, n_samples=2, resample_stale=True, run_dir=tmp_path
        )
        history = await trainer.afit(waits_then_calls, _tasks([[0.0, 0.0]] * 4))
    trained = [group for batch in algorithm.batches for group in {t.group_id for t in batch}]
    # Every task is trained on exactly once; the one dropped as stale, as a group sampled again.
    assert sorted(group.split("-")[0] for group in trained) == ["step1", "step2", "step3", "step4"]
    assert "step2-task0" not in trained
    assert any(group.startswith("step2-task0-resample") for group in trained)
    assert history[-1]["groups_resampled"] == history[-1]["groups_dropped_stale"] >= 1


class _StaleMaker(RecordingAlgorithm):
    """Its first update waits for every rollout enqueued so far and raises the policy version by two."""

    def __init__(self, upstream: ScriptedUpstream, store: InMemoryStore) -> None:
        super().__init__(upstream)
        self.store = store

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        if not self.batches:
            await self.store.wait([r.rollout_id for r in await self.store.list_rollouts(mode=Mode.TRAIN)])
        self._version += 1 if self.batches else 2  # pyright: ignore[reportPrivateUsage]
        self.batches.append(list(transitions))
        return {"loss": 0.0}


async def test_a_hanging_agent_cannot_stall_training() -> None:
    store = InMemoryStore()
    tasks = _tasks([[0.0, 0.0]] * 8)
    hanging = tasks[1]
    assert isinstance(hanging, dict)
    hanging["hang"] = True
    history, algorithm = await _fit(tasks, store=store, max_staleness=1, batch_size=2, n_samples=2)
    assert history[-1]["groups_aged_out"] == 1
    assert sum(len({t.group_id for t in batch}) for batch in algorithm.batches) == 7
    rollouts = await store.list_rollouts(group_id="step1-task1")
    assert {r.status for r in rollouts} == {RolloutStatus.CANCELLED}
    for r in rollouts:
        assert dropped_reason(await last_attempt_spans(store, r.rollout_id)) in (DropReason.AGED_OUT, None)


async def test_a_hanging_agent_ages_out_by_time_even_with_k_0() -> None:
    tasks = _tasks([[0.0, 0.0]] * 3)
    hanging = tasks[2]
    assert isinstance(hanging, dict)
    hanging["hang"] = True
    history, algorithm = await _fit(tasks, max_staleness=0, batch_size=1, n_samples=1, group_timeout=2.0)
    assert history[-1]["groups_aged_out"] == 1
    assert len(algorithm.batches) == 2


async def test_the_metrics_say_how_the_asynchronous_run_went() -> None:
    history, _ = await _fit(_tasks([[0.01, 0.0]] * 6), max_staleness=2, batch_size=2, n_samples=2)
    for metrics in history:
        for name in ("rollouts_per_s", "updates_per_s", "learner_idle_fraction", "runner_idle_fraction"):
            assert metrics[name] >= 0
        assert metrics["samples_per_update"] == 4
        assert sum(metrics[f"staleness_{d}"] for d in range(3)) == metrics["transitions"]
