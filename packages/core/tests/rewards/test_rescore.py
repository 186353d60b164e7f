"""``relight rescore`` over a real run of the calculator scenario, whose every rollout is known in advance.

The run trains (with an algorithm that learns nothing) six tasks of three samples each, rewarded 1.0 for the
right number. The changed reward counts a right number only when the calculator computed it, and raises on an
empty answer. Worked out by hand from :data:`relight_testing.calculator_scenario.BEHAVIOURS`:

====  ======================  ===============  ========================  =======  =====
task  samples                 rewards before   rewards after             signal   flips
====  ======================  ===============  ========================  =======  =====
2     tool, tool, right       1, 1, 1 (flat)   1, 1, 0                   gained   3
3     right, wrong, right     1, 0, 1          0, 0, 0 (flat)            lost     3
4     tool, wrong, wrong      1, 0, 0          1, 0, 0                   kept     0
5     right, right, right     1, 1, 1 (flat)   0, 0, 0 (flat)            flat     0
6     right, tool, wrong      1, 1, 0          0, 1, 0                   kept     1
7     tool, empty, wrong      1, 0, 0          1, (raises), 0            unknown  0
====  ======================  ===============  ========================  =======  =====

(A flip is an advantage changing sign: task 2's three go from 0 to +, +, −; task 3's from +, −, + to 0; in
task 6 the first sample's goes from + to −.)
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from relight.cli import main
from relight.plugins import open_store
from relight.records import Span, SpanKind
from relight.rewards import GroupScores, Sample
from relight.rewards.rescore import rescore
from relight.run_folders import read_run
from relight.scripted import ScriptedUpstream
from relight.training.trainer import Trainer
from relight.transitions.builder import TransitionBuilder
from relight_testing import calculator_scenario as scenario
from relight_testing.algorithms import RecordingAlgorithm

GROUPS = {"gained": 1, "lost": 1, "kept": 2, "flat": 1, "unknown": 1}
FLIPS = 7


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the scenario: two steps of three tasks, three samples each, in its own run folder."""
    folder = tmp_path_factory.mktemp("scenario") / "run"

    async def fit() -> None:
        async with ScriptedUpstream(scenario.script) as upstream:
            trainer = Trainer(
                RecordingAlgorithm(upstream),
                batch_size=3,
                n_samples=scenario.SAMPLES,
                run_dir=folder,
                console=Console(file=io.StringIO()),
            )
            await trainer.afit(scenario.calculator_agent, scenario.tasks())

    asyncio.run(fit())
    return folder


@pytest.fixture
def rewards_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the user's, importable from the working directory as ``--reward`` needs it."""
    (tmp_path / "my_rewards.py").write_text(
        "from relight_testing.calculator_scenario import verified_reward\n"
        "def broken(task, rollout):\n    return 'not a number'\n"
    )
    monkeypatch.chdir(tmp_path)
    return "my_rewards"


def stored(url: str) -> tuple[list[Span], list[Any], list[float]]:
    """Every span, the rollouts' summaries (their recorded rewards) and the rewards transitions train on."""

    async def read() -> tuple[list[Span], list[Any], list[float]]:
        store = open_store(url)
        try:
            rollouts = await store.list_rollouts()
            spans = sorted(
                [s for r in rollouts for s in await store.query_spans(r.rollout_id)], key=lambda s: s.span_id
            )
            summaries = (await store.list_summaries(limit=1000)).rows
            transitions = await TransitionBuilder().from_store(store, rollouts)
            return spans, [(s.rollout.rollout_id, s.reward) for s in summaries], [t.reward for t in transitions]
        finally:
            await store.close()

    return asyncio.run(read())


def test_rescore_counts_the_groups_that_gain_and_lose_signal_as_worked_out_by_hand(
    run_dir: Path, rewards_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{run_dir / 'store.db'}"
    before = stored(url)
    png = tmp_path / "moves.png"
    reward = f"{rewards_module}:verified_reward"
    assert main(["rescore", "--run", str(run_dir), "--reward", reward, "--json", "--png", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["groups"] == GROUPS
    assert sum(r["flipped"] for r in report["rollouts"]) == FLIPS
    by_task = {row["group_id"]: row["change"] for row in _group_rows(report)}
    assert sorted(by_task.values()) == sorted(k for k, n in GROUPS.items() for _ in range(n))
    errors = [r for r in report["rollouts"] if r["error"]]
    assert [e["error"].split(" (at ")[0] for e in errors] == ["ValueError: the rollout gave no answer"]
    assert report["stored"] == 6 * 3 - 1  # every rollout but the one the reward raised on
    assert report["before"]["mean"] == pytest.approx(12 / 18)
    assert report["after"]["mean"] == pytest.approx(5 / 17)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    spans, summaries, trained = stored(url)
    rescored = [s for s in spans if s.kind is SpanKind.RESCORED]
    assert len(rescored) == 17
    assert {s.name for s in rescored} == {"rescored verified_reward"}
    assert [s for s in spans if s.kind is not SpanKind.RESCORED] == before[0]  # the originals, untouched
    assert (summaries, trained) == (before[1], before[2])  # recorded rewards and what training reads alike

    # The same name again is refused, and stores nothing; --dry-run reports without storing.
    assert main(["rescore", "--run", str(run_dir), "--reward", reward]) == 2
    assert "17 rollout(s) already carry a rescored reward named 'verified_reward'" in capsys.readouterr().err
    assert main(["rescore", "--run", str(run_dir), "--reward", reward, "--dry-run", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "nothing stored" in out
    assert "rollouts whose advantage flips sign (7)" in out
    assert "ValueError: the rollout gave no answer" in out
    assert len(stored(url)[0]) == len(spans)


def _group_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    return [{"group_id": group, "change": change} for group, change in report["group_changes"].items()]


def test_bad_input_is_refused_with_2_and_stores_nothing(
    run_dir: Path, rewards_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{run_dir / 'store.db'}"
    count = len(stored(url)[0])
    assert main(["rescore", "--store", url, "--reward", "no_such_module:reward"]) == 2
    assert "cannot import reward 'no_such_module:reward': ModuleNotFoundError" in capsys.readouterr().err
    assert main(["rescore", "--store", url, "--reward", f"{rewards_module}:nothing_here"]) == 2
    assert "AttributeError" in capsys.readouterr().err
    assert main(["rescore", "--run", str(tmp_path), "--reward", f"{rewards_module}:verified_reward"]) == 2
    assert "is not a run folder: it has no run.json" in capsys.readouterr().err
    # A reward that returns no number is reported for every rollout, and the run goes on: nothing to store.
    assert main(["rescore", "--store", url, "--reward", f"{rewards_module}:broken", "--name", "b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["error"] for r in report["rollouts"]} == {"the reward returned str 'not a number', not a number"}
    assert report["stored"] == 0
    assert report["groups"] == {"unknown": 6}
    assert len(stored(url)[0]) == count


class _RankByLength:
    """A group reward (as a judge is one): the longest final answer of a group gets 1, the rest 0."""

    name = "longest"

    async def score(self, group_id: str, task: Any, samples: list[Sample]) -> GroupScores:
        lengths = {s.rollout.rollout_id: len(_answer(s)) for s in samples}
        best = max(lengths.values())
        return GroupScores(rewards={rid: float(length == best) for rid, length in lengths.items()})


def _answer(sample: Sample) -> str:
    calls = sorted((s for s in sample.spans if s.kind is SpanKind.LLM), key=lambda s: s.start_time)
    return str(json.loads(str(calls[-1].attributes["gen_ai.output.messages"]))[0]["content"])


async def test_a_group_reward_rescores_whole_groups_and_adds_when_asked(run_dir: Path) -> None:
    store = open_store(f"sqlite:///{run_dir / 'store.db'}")
    try:
        report = await rescore(store, _RankByLength(), name="longest", adds=True, dry_run=True)
    finally:
        await store.close()
    run = read_run(run_dir)
    assert all(r.rollout_id.startswith(run.run_id) for r in report.rollouts)
    task7 = [r for r in report.rollouts if r.group_id == report.groups[-1].group_id]
    # task 7: answers "49" (tool), "" (empty) and "50" (wrong): the two longest tie and get 1 each, added.
    assert sorted((r.before, r.after) for r in task7) == [(0.0, 0.0), (0.0, 1.0), (1.0, 2.0)]
    assert report.stored == 0
