"""The run folder's reward curve: drawn early, then at most every ``plot_every``, and complete at the end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from relight.training import run_folder as runfolder
from relight.training.run_folder import RunFolder


def test_the_curve_is_redrawn_at_most_every_plot_every_and_completed_by_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[int] = []

    def plot(rows: Sequence[Mapping[str, float | str]], path: Path, *, title: str = "") -> Path:
        drawn.append(len(rows))
        return path

    monkeypatch.setattr(runfolder, "plot_rewards", plot)
    now = [0.0]
    run = RunFolder(tmp_path, plot_every=10.0, clock=lambda: now[0])
    for step in range(1, 5):  # four steps within 10 s: only the first is drawn at once
        now[0] += 2.0
        run.record("train", {"step": step, "reward_mean": 0.5})
    now[0] += 10.0
    run.record("val", {"step": 4, "val_reward_mean": 0.7})
    run.record("train", {"step": 5, "reward_mean": 0.6})
    assert drawn == [1, 5]
    run.write_summary({"status": "finished"})
    assert drawn == [1, 5, 6]
    run.write_summary({"status": "finished"})  # nothing new to draw
    assert drawn == [1, 5, 6]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 6
