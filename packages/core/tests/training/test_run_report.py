"""What a run reports was measured: a before-figure only from a validation before the first update, no summary
field copied from another, and the trackers ``RELIGHT_LOGGERS`` names when the code names none."""

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest
from pydantic import JsonValue
from rich.console import Console

from relight import Trainer
from relight.agent import LLM, rollout
from relight.plugins import plugin_manager, reset_plugins
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.tracking import RunInfo
from relight.training.run_folder import RunFolder
from relight_testing.algorithms import RecordingAlgorithm

_updates: list[int] = [0]
"""How many updates the algorithm of the running test has made: the policy's "skill"."""


@rollout
def learns(task: Mapping[str, Any], llm: LLM) -> float:
    """One call; its reward rises with the policy (0.25 before any update, 1 after two): a policy that changes."""
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": str(task["text"])}])
    return min(0.25 + 0.375 * _updates[0], 1.0)


class CountingAlgorithm(RecordingAlgorithm):
    async def update(self, transitions: Any) -> Mapping[str, float]:
        _updates[0] += 1
        return await super().update(transitions)


TASKS = [{"text": "a"}, {"text": "b"}]
VAL = [{"text": "v"}]


async def fit(tmp_path: Path, **options: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    _updates[0] = 0
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            CountingAlgorithm(upstream),
            store=InMemoryStore(),
            batch_size=1,
            n_samples=2,
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
            **options,
        )
        await trainer.afit(learns, TASKS, VAL)
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return summary, rows


async def test_by_default_a_run_with_validation_tasks_measures_its_before_figure(tmp_path: Path) -> None:
    summary, rows = await fit(tmp_path)
    assert [(row["kind"], row["step"]) for row in rows] == [("val", 0), ("train", 1), ("train", 2), ("val", 2)]
    assert summary["initial_val_reward_mean"] == rows[0]["val_reward_mean"] == 0.25
    assert summary["final_val_reward_mean"] == rows[-1]["val_reward_mean"] == 1.0
    assert summary["initial_val_reward_mean"] != summary["final_val_reward_mean"]


async def test_a_run_whose_only_validation_ran_at_the_end_reports_no_before_figure(tmp_path: Path) -> None:
    summary, rows = await fit(tmp_path, val_before_fit=False)
    assert [(row["kind"], row["step"]) for row in rows] == [("train", 1), ("train", 2), ("val", 2)]
    assert "initial_val_reward_mean" not in summary
    assert summary["final_val_reward_mean"] == 1.0


async def test_val_before_fit_with_val_every_validates_step_0_once(tmp_path: Path) -> None:
    summary, rows = await fit(tmp_path, val_every=1, val_before_fit=True)
    vals = [(row["step"], row["val_reward_mean"]) for row in rows if row["kind"] == "val"]
    assert vals == [(0, 0.25), (1, 0.625), (2, 1.0)]
    assert (summary["initial_val_reward_mean"], summary["final_val_reward_mean"]) == (0.25, 1.0)


def test_no_summary_field_is_copied_from_another(tmp_path: Path) -> None:
    """Each figure is its own row's, or absent: never the only validation standing in for the other end."""
    cases: list[tuple[list[tuple[str, dict[str, float]]], dict[str, float]]] = [
        (
            [("train", {"step": 1, "reward_mean": 0.5}), ("val", {"step": 1, "val_reward_mean": 0.15})],
            {"final_reward_mean": 0.5, "final_val_reward_mean": 0.15},
        ),
        (
            [("val", {"step": 0, "val_reward_mean": 0.15}), ("train", {"step": 1, "reward_mean": 0.5})],
            {"final_reward_mean": 0.5, "initial_val_reward_mean": 0.15},
        ),
        (
            [
                ("val", {"step": 0, "val_reward_mean": 0.1}),
                ("train", {"step": 1, "reward_mean": 0.5}),
                ("val", {"step": 1, "val_reward_mean": 0.3}),
                ("train", {"step": 2, "reward_mean": 0.6}),
            ],
            {"final_reward_mean": 0.6, "initial_val_reward_mean": 0.1},
        ),
        ([("val", {"step": 0, "val_reward_mean": 0.1})], {"initial_val_reward_mean": 0.1}),
    ]
    figures = ("final_reward_mean", "initial_val_reward_mean", "final_val_reward_mean")
    for index, (rows, expected) in enumerate(cases):
        run = RunFolder(tmp_path / str(index), plot_every=1e9)
        for kind, metrics in rows:
            run.record(kind, metrics)  # pyright: ignore[reportArgumentType]
        run.write_summary({"status": "finished"})
        summary = json.loads(run.summary_path.read_text())
        assert {key: summary[key] for key in figures if key in summary} == expected, rows


class Recording:
    name = "recording"
    made: ClassVar[list["Recording"]] = []

    def __init__(self) -> None:
        self.rows: list[tuple[str, int]] = []
        self.summary: Mapping[str, JsonValue] | None = None
        Recording.made.append(self)

    def start(self, run: RunInfo) -> str | None:
        return None

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        self.rows.append((kind, step))

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        self.summary = summary


class RecordingPlugin:
    from relight.hookspecs import hookimpl

    @hookimpl
    def relight_register_loggers(self, register: Any) -> None:
        register("recording", Recording)


@pytest.fixture
def recording_plugin() -> Any:
    reset_plugins()
    plugin_manager().register(RecordingPlugin())
    Recording.made.clear()
    yield
    reset_plugins()


async def test_relight_loggers_names_the_trackers_of_a_trainer_given_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recording_plugin: None
) -> None:
    monkeypatch.setenv("RELIGHT_LOGGERS", "recording")
    summary, rows = await fit(tmp_path)
    (tracker,) = Recording.made
    assert tracker.rows == [(row["kind"], row["step"]) for row in rows]
    assert tracker.summary is not None
    assert tracker.summary["status"] == summary["status"] == "finished"


async def test_loggers_given_in_code_win_over_relight_loggers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recording_plugin: None
) -> None:
    monkeypatch.setenv("RELIGHT_LOGGERS", "recording")
    await fit(tmp_path, loggers=[])
    assert Recording.made == []
