"""A run folder: everything one :meth:`relight.Trainer.fit` leaves behind, written as it goes.

::

    runs/20260124-013000/
        run.json           what the run is (agent, algorithm, batch size, tasks), to resume it (relight.training.resume)
        metrics.jsonl      one JSON object per training step ("kind": "train") and validation ("kind": "val"),
                           and one where a killed run was resumed ("kind": "resume")
        summary.json       how the run ended: steps, policy version, rewards, time, where the rest is
        reward_curve.png   training and validation reward per step, redrawn as lines come (at most every 10 s)
        checkpoints/       step-<n>/ as the algorithm saves them, with relight's manifest (the last two are kept)
        store.db           the run's store, when it is the default SQLite file

``runs/`` is relative to the working directory; ``$RELIGHT_RUNS`` puts the default run folders
elsewhere (a scratch disk, or a temporary folder in tests, which never litter the checkout).

Everything is flushed as soon as it is known, so ``tail -f metrics.jsonl`` or opening the PNG follows
a run live, and a run that stopped early still explains itself.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, cast

from pydantic import JsonValue

from relight.tracking._logger import LoggerSet
from relight.training.run_plot import plot_rewards

__all__ = ["RUNS_ENV", "RunFolder", "default_run_dir"]

logger = logging.getLogger(__name__)

RowKind = Literal["train", "val", "resume"]


PLOT_EVERY_SECONDS = 10.0
"""How long the reward curve may lag the metrics file. Drawing a PNG costs ~0.2 s of CPU on the event
loop that also serves the agents (a fifth of a short step in ``benchmarks/async_training.py``)."""

RUNS_ENV = "RELIGHT_RUNS"
"""The environment variable naming the folder default run folders go into (``runs`` when unset)."""


def default_run_dir(root: str | Path | None = None) -> Path:
    """``<root>/<date>-<time>``, with a suffix when a run started in the same second already took it.

    ``root`` defaults to ``$RELIGHT_RUNS``, or ``runs`` under the working directory.
    """
    root = root if root is not None else os.environ.get(RUNS_ENV) or "runs"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, suffix = Path(root) / stamp, 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{stamp}-{suffix}"
    return path


class RunFolder:
    """Writes a run's metrics, summary, reward curve and checkpoints under ``path`` (created if missing),
    and hands every metrics row to ``loggers`` (see :mod:`relight.tracking`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        keep_checkpoints: int = 2,
        plot_every: float = PLOT_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        loggers: LoggerSet | None = None,
    ) -> None:
        self.path = Path(path).resolve()
        self.loggers = loggers or LoggerSet([])
        """Experiment trackers (W&B, MLflow, TensorBoard) that receive every row too."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.keep_checkpoints = keep_checkpoints
        self.plot_every = plot_every
        self.rows: list[dict[str, float | str]] = []
        self._began = time.time()
        self._clock = clock
        self._plotted: tuple[int, float] | None = None
        """(rows drawn, when) of the last drawing."""

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def plot_path(self) -> Path:
        return self.path / "reward_curve.png"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def store_url(self) -> str:
        """The URL of the run's own SQLite store (absolute: ``sqlite:////…/store.db``)."""
        return f"sqlite:///{self.path / 'store.db'}"

    def record(self, kind: RowKind, metrics: Mapping[str, float]) -> None:
        """Append one line to metrics.jsonl; redraw the reward curve if the last drawing is ``plot_every`` old."""
        row: dict[str, float | str] = {"kind": kind, "time": round(time.time(), 3), **metrics}
        self.rows.append(row)
        with self.metrics_path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
        self.loggers.log(kind, row)
        if self._plotted is None or self._clock() - self._plotted[1] >= self.plot_every:
            self._plot()

    def resume(self, step: int, metrics: Mapping[str, float], note: Mapping[str, float]) -> list[dict[str, float]]:
        """Take up the metrics a resumed run had up to ``step``, then add a ``resume`` row; returns them as
        :meth:`relight.Trainer.fit` returns a history.

        Rows of steps after ``step`` (done again now) are dropped from metrics.jsonl; the train row
        of ``step`` is put back from the checkpoint's ``metrics`` when the process died before writing it.
        """
        kept = [row for row in self.read_rows() if float(row.get("step", 0)) <= step]
        if metrics and not any(row["kind"] == "train" and row.get("step") == step for row in kept):
            kept.append({"kind": "train", "time": round(time.time(), 3), **metrics})
        partial = self.metrics_path.with_name(self.metrics_path.name + ".partial")
        partial.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
        partial.replace(self.metrics_path)
        self.rows = kept
        self.record("resume", {"step": step, **note})
        history: list[dict[str, float]] = []
        previous: dict[str, float | str] | None = None
        for row in kept:
            values = {key: float(value) for key, value in row.items() if key not in ("kind", "time")}
            if (
                row["kind"] == "val"
                and previous is not None
                and previous["kind"] == "train"
                and (previous["step"] == row["step"])
            ):
                history[-1] |= values  # a scheduled validation: fit() returns it within its step's metrics
            elif row["kind"] in ("train", "val"):
                history.append(values)
            previous = row
        return history

    def read_rows(self) -> list[dict[str, float | str]]:
        """The rows of metrics.jsonl as written so far (a line a crash cut short is left out)."""
        rows: list[dict[str, float | str]] = []
        if self.metrics_path.exists():
            for line in self.metrics_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and "kind" in row:
                    rows.append(cast(dict[str, float | str], row))
        return rows

    def _plot(self) -> None:
        """Draw every row so far into reward_curve.png (warns once when matplotlib is missing)."""
        first = self._plotted is None
        self._plotted = (len(self.rows), self._clock())
        try:
            plot_rewards(self.rows, self.plot_path, title=self.path.name)
        except ImportError:
            if first:
                logger.warning("relight: no reward_curve.png in %s: install matplotlib to get one", self.path)

    def write_summary(self, summary: Mapping[str, JsonValue]) -> None:
        """Write summary.json: ``summary`` over what the folder itself knows (files, time, last rewards).

        The run is over, so the reward curve is brought up to its last row too.
        """
        if self.rows and (self._plotted is None or self._plotted[0] < len(self.rows)):
            self._plot()
        train = [row for row in self.rows if row["kind"] == "train"]
        val = [row for row in self.rows if row["kind"] == "val"]
        resumed: list[JsonValue] = [row["step"] for row in self.rows if row["kind"] == "resume"]
        known: dict[str, JsonValue] = {
            "run_dir": str(self.path),
            "steps": len(train),
            **({"resumed_at_steps": resumed} if resumed else {}),
            "wall_seconds": round(time.time() - self._began, 1),
        }
        if train:
            known["final_reward_mean"] = train[-1].get("reward_mean")
        known |= _measured_validations(train, val)
        text = json.dumps({**known, **summary}, indent=2)
        self.summary_path.write_text(text + "\n", encoding="utf-8")
        self.loggers.finish({**known, **summary})

    def add_to_summary(self, extra: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        """Merge ``extra`` into the summary.json already written (a demo's evaluation); returns the result."""
        summary: dict[str, JsonValue] = {}
        if self.summary_path.exists():
            summary = json.loads(self.summary_path.read_text(encoding="utf-8"))
        summary |= extra
        self.summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return summary

    def prune_checkpoints(self) -> None:
        """Keep the newest ``keep_checkpoints`` of ``checkpoints/step-<n>``: a real model's are hundreds of MB each."""
        steps = sorted(
            (int(match.group(1)), path)
            for path in (self.checkpoints.iterdir() if self.checkpoints.is_dir() else ())
            if (match := re.fullmatch(r"step-(\d+)", path.name))
        )
        for _, path in steps[: max(len(steps) - self.keep_checkpoints, 0)]:
            shutil.rmtree(path, ignore_errors=True)


def _measured_validations(
    train: list[dict[str, float | str]], val: list[dict[str, float | str]]
) -> dict[str, JsonValue]:
    """The before- and after-figures of validations that measured them, each left out when none did.

    The before-figure is the validation at step 0, which ran before the first update
    (``Trainer(val_before_fit=...)``); the after-figure the one at the last training step, which
    measured the policy the run ended with. A run whose only validation ran at the end has no
    before-figure, and one that stopped before validating its last policy no after-figure: a figure
    borrowed from another validation would claim a measurement that never happened.
    """
    figures: dict[str, JsonValue] = {}
    before = next((row for row in val if row.get("step") == 0), None)
    if before is not None:
        figures["initial_val_reward_mean"] = before.get("val_reward_mean")
    last_step = train[-1].get("step") if train else None
    after = [row for row in val if last_step is not None and row.get("step") == last_step]
    if after:
        figures["final_val_reward_mean"] = after[-1].get("val_reward_mean")
    return figures
