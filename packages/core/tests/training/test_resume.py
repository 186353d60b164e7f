"""A run that stopped (here: its algorithm raised, as a crash in the user's code would) is taken up again by
the same ``fit`` on the same run folder: from its last whole checkpoint, with its metrics file, reusing
the rollouts the store already holds; a different run or a finished one is refused, naming why.
Real runner, gateway, scripted upstream and SQLite store; the tests of a SIGKILLed trainer process
are in the repository's ``tests/test_trainer_resume.py``."""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from rich.console import Console

import relight
from relight import Trainer
from relight._internal.ids import random_hex
from relight.errors import ConfigError
from relight.records import Mode, RolloutRequest, Transition
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.tracing.hook_failures import hook_failures
from relight.training.resume import Checkpoints
from relight.transitions.trained_calls import TRAINED_SPAN, record_trained
from relight_testing.agents import three_calls
from relight_testing.algorithms import RecordingAlgorithm

TASKS = [{"text": f"task {i}"} for i in range(6)]


class Crash(RuntimeError):
    pass


class CrashingAlgorithm(RecordingAlgorithm):
    """Raises in its ``crash_at``-th update, as a reward function or an OOM in the learner would; None never does.

    A run is resumed with the algorithm it started with: the same class, here made not to crash.
    """

    def __init__(self, upstream: ScriptedUpstream, crash_at: int | None = None) -> None:
        super().__init__(upstream)
        self.crash_at = crash_at

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        if len(self.batches) + 1 == self.crash_at:
            raise Crash(f"crash in update {self.crash_at}")
        return await super().update(transitions)


def trainer(algorithm: RecordingAlgorithm, run_dir: Path, output: io.StringIO, **options: object) -> Trainer:
    settings: dict[str, object] = {"batch_size": 2, "n_samples": 2, "run_dir": run_dir, **options}
    return Trainer(algorithm, console=Console(file=output, width=300), **settings)  # type: ignore[arg-type]


def kinds(run_dir: Path) -> list[tuple[str, int]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["kind"], int(row["step"])) for row in rows]


async def crashed_run(run_dir: Path, crash_at: int = 3, **options: object) -> CrashingAlgorithm:
    async with ScriptedUpstream() as upstream:
        algorithm = CrashingAlgorithm(upstream, crash_at)
        with pytest.raises(Crash):
            await trainer(algorithm, run_dir, io.StringIO(), **options).afit(three_calls, TASKS)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    return algorithm


async def attempts_per_rollout(run_dir: Path) -> Counter[int]:
    store = relight.open_store(f"sqlite:///{run_dir / 'store.db'}")
    try:
        return Counter(r.attempt_count for r in await store.list_rollouts(mode=Mode.TRAIN))
    finally:
        await store.close()


async def test_a_stopped_run_resumes_after_its_last_checkpoint_reusing_the_rollouts_in_the_store(
    tmp_path: Path,
) -> None:
    await crashed_run(tmp_path)
    output = io.StringIO()
    async with ScriptedUpstream() as upstream:
        algorithm = CrashingAlgorithm(upstream)
        history = await trainer(algorithm, tmp_path, output).afit(three_calls, TASKS)
    assert "resuming the run" in output.getvalue()
    assert "from step 2" in output.getvalue()
    assert [len(batch) for batch in algorithm.batches] == [2 * 2 * 3]  # step 3 alone, every call of it once
    assert {t.group_id for t in algorithm.batches[0]} == {"step3-task0", "step3-task1"}
    assert [row["step"] for row in history] == [1, 2, 3]
    assert [row["policy_version"] for row in history] == [1, 2, 3]
    assert kinds(tmp_path) == [("train", 1), ("train", 2), ("resume", 2), ("train", 3)]
    # Step 3's rollouts had all finished when the update crashed: taken from the store, not run again.
    assert await attempts_per_rollout(tmp_path) == {1: 3 * 2 * 2}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["resumed_at_steps"]) == ("finished", 3, [2])


async def test_a_truncated_checkpoint_is_skipped_for_the_one_before_with_a_warning(tmp_path: Path) -> None:
    await crashed_run(tmp_path)
    (tmp_path / "checkpoints" / "step-2" / "version").write_text("")  # cut short, as a full disk would
    output = io.StringIO()
    async with ScriptedUpstream() as upstream:
        algorithm = CrashingAlgorithm(upstream)
        history = await trainer(algorithm, tmp_path, output).afit(three_calls, TASKS)
    text = output.getvalue()
    assert "step-2 skipped: version is 0 bytes, the manifest says 1" in text
    assert "from step 1" in text
    assert [{t.group_id for t in batch} for batch in algorithm.batches] == [
        {"step2-task0", "step2-task1"},
        {"step3-task0", "step3-task1"},
    ]
    assert [row["policy_version"] for row in history] == [1, 2, 3]
    assert kinds(tmp_path) == [("train", 1), ("resume", 1), ("train", 2), ("train", 3)]
    assert await attempts_per_rollout(tmp_path) == {1: 3 * 2 * 2}  # step 2 done again on the same rollouts


def test_a_checkpoint_is_renamed_into_place_only_once_whole(tmp_path: Path) -> None:
    class Failing(RecordingAlgorithm):
        def save(self, directory: Path) -> None:
            super().save(directory)
            raise OSError("no space left on device")

    checkpoints = Checkpoints(tmp_path)
    with pytest.raises(OSError, match="no space"):
        checkpoints.save(1, Failing(ScriptedUpstream()), loop={}, metrics={})
    assert checkpoints.steps() == []
    assert [p.name for p in tmp_path.iterdir()] == [".step-1.partial"]
    assert checkpoints.restore(RecordingAlgorithm(ScriptedUpstream())) is None
    assert list(tmp_path.iterdir()) == []  # the half-written one is cleared on resume


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 3}, "batch_size (2 when the run started, 3 now)"),
        ({"n_samples": 1}, "n_samples (2 when the run started, 1 now)"),
        ({"max_staleness": 1}, "max_staleness (None when the run started, 1 now)"),
        ({"tasks": TASKS[:5]}, "the task list (6 tasks when the run started, 5 now)"),
        ({"tasks": [*TASKS[:5], {"text": "other"}]}, "the task list (6 tasks when the run started, 6 now, with other"),
        ({"agent": relight.rollout(name="other_agent")(three_calls.function)}, "agent ('three_calls' when"),
    ],
)
async def test_resuming_a_different_run_is_refused_naming_the_difference(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    await crashed_run(tmp_path)
    tasks = change.pop("tasks", TASKS)
    agent = change.pop("agent", three_calls)
    async with ScriptedUpstream() as upstream:
        with pytest.raises(ConfigError) as refused:
            await trainer(CrashingAlgorithm(upstream), tmp_path, io.StringIO(), **change).afit(agent, tasks)  # type: ignore[arg-type]
    assert named in str(refused.value)
    assert "cannot resume the run" in str(refused.value)


async def test_resuming_another_algorithm_is_refused(tmp_path: Path) -> None:
    await crashed_run(tmp_path)

    class Other(RecordingAlgorithm):
        pass

    async with ScriptedUpstream() as upstream:
        named = r"algorithm \('.*CrashingAlgorithm' when the run started, '.*Other' now\)"
        with pytest.raises(ConfigError, match=named):
            await trainer(Other(upstream), tmp_path, io.StringIO()).afit(three_calls, TASKS)


async def test_a_finished_run_is_not_trained_again(tmp_path: Path) -> None:
    async with ScriptedUpstream() as upstream:
        await trainer(RecordingAlgorithm(upstream), tmp_path, io.StringIO()).afit(three_calls, TASKS)
        algorithm = RecordingAlgorithm(upstream)
        with pytest.raises(ConfigError, match="already finished; there is nothing to resume"):
            await trainer(algorithm, tmp_path, io.StringIO()).afit(three_calls, TASKS)
    assert algorithm.batches == []


async def test_an_asynchronous_run_resumes_with_the_tasks_it_had_not_trained(tmp_path: Path) -> None:
    crashed = await crashed_run(tmp_path, max_staleness=1)
    async with ScriptedUpstream() as upstream:
        algorithm = CrashingAlgorithm(upstream)
        history = await trainer(algorithm, tmp_path, io.StringIO(), max_staleness=1).afit(three_calls, TASKS)
    before = Counter(t.group_id for batch in crashed.batches for t in batch)
    after = Counter(t.group_id for batch in algorithm.batches for t in batch)
    assert not set(before) & set(after)  # no group trained on both sides of the crash
    assert len(before) + len(after) == len(TASKS)
    assert all(count == 2 * 3 for count in (before + after).values())  # every group whole: 2 samples x 3 calls
    assert [row["step"] for row in history] == [1, 2, 3]
    assert all(row["staleness_max"] <= 1 for row in history)
    assert kinds(tmp_path)[-2:] == [("resume", 2), ("train", 3)]


def test_span_ids_stay_unique_when_a_checkpoint_restores_pythons_random_state() -> None:
    """relight-torch's checkpoints restore ``random``'s state: a resumed run replays its draws, never its ids."""
    state = random.getstate()
    first = [random_hex(16) for _ in range(3)]
    random.setstate(state)
    assert not set(first) & {random_hex(16) for _ in range(3)}


async def test_a_resumed_history_reads_as_the_uninterrupted_runs_validations_included(tmp_path: Path) -> None:
    val = [{"text": "v"}]
    async with ScriptedUpstream() as upstream:
        with pytest.raises(Crash):
            await trainer(CrashingAlgorithm(upstream, 3), tmp_path / "resumed", io.StringIO(), val_every=2).afit(
                three_calls, TASKS, val
            )
        resumed = await trainer(CrashingAlgorithm(upstream), tmp_path / "resumed", io.StringIO(), val_every=2).afit(
            three_calls, TASKS, val
        )
        whole = await trainer(CrashingAlgorithm(upstream), tmp_path / "whole", io.StringIO(), val_every=2).afit(
            three_calls, TASKS, val
        )
    assert [sorted(row) for row in resumed] == [sorted(row) for row in whole]
    validated = [(row["step"], "val_reward_mean" in row) for row in resumed]
    assert validated == [(0, True), (1, False), (2, True), (3, False), (3, True)]


async def test_a_step_made_again_records_each_trained_call_once() -> None:
    """The first try recorded its update, then died before its checkpoint; the step made again reuses
    one of its attempts and retries the other: each call ends with one record, and nothing fails."""
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="a", rollout_id="ra"), RolloutRequest(input="b", rollout_id="rb")])
    claimed = [await store.claim("w") for _ in range(2)]
    attempts = {rollout.rollout_id: attempt.attempt_id for rollout, attempt in (c for c in claimed if c is not None)}

    def transition(rollout_id: str, span_id: str) -> Transition:
        return Transition(
            rollout_id=rollout_id,
            attempt_id=attempts[rollout_id],
            group_id="g",
            step=0,
            prompt_token_ids=[1],
            response_token_ids=[2],
            reward=1.0,
            span_id=span_id,
        )

    failures = dict(hook_failures())
    await record_trained(store, None, [transition("ra", "s1")], 1)
    await record_trained(store, None, [transition("ra", "s1"), transition("rb", "s2")], 1)
    assert hook_failures() == failures
    records = [span for rid in ("ra", "rb") for span in await store.query_spans(rid) if span.name == TRAINED_SPAN]
    assert sorted(str(span.attributes["relight.trained.span_ids"]) for span in records) == ["['s1']", "['s2']"]
