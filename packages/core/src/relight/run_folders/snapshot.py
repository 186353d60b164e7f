"""A run folder read back: what the run is, its metrics so far and, once it ended, its summary.

``Trainer.fit`` writes the folder as it goes (:mod:`relight.training.run_folder`); this module reads it, at
any moment: a run still training has no ``summary.json`` yet and a ``metrics.jsonl`` that grows while it is
read (a line cut short by the writer is left out, as a crash's would be). ``run.json`` says which layout the
folder has (``schema``) and which relight wrote it; a folder of another layout is refused with both named,
never half-read.
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import JsonValue

from relight.errors import RunFolderError

__all__ = [
    "METRICS_FILE",
    "RUN_FILE",
    "RUN_SCHEMA",
    "SUMMARY_FILE",
    "Point",
    "RunSnapshot",
    "find_runs",
    "read_run",
    "relight_version",
    "run_file_header",
]

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
RUN_SCHEMA = 1
"""The layout of run.json, metrics.jsonl and summary.json this relight writes and reads. A run.json without
``schema`` was written before the layout was numbered, and has layout 1."""

Point = tuple[float, float]
"""(step, value) of a curve."""


def relight_version() -> str:
    """The installed relight's version, as run.json records it."""
    try:
        return importlib.metadata.version("relight")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def run_file_header() -> dict[str, JsonValue]:
    """What run.json starts with: the layout it is written in and the relight that wrote it."""
    return {"schema": RUN_SCHEMA, "relight_version": relight_version()}


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """One run folder as it stands when read: a finished, failed or still running run alike."""

    path: Path
    run_id: str
    started: float | None
    relight_version: str | None
    settings: dict[str, JsonValue]
    """What the run is, one entry per setting: its identity (agent, algorithm, model, batch size, …) and,
    where run.json has them, the trainer's and the algorithm's settings (``algorithm.lr``, …)."""
    identity: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])
    """run.json's identity as written: ``algorithm`` is the algorithm's class by its full import path there."""
    rows: list[dict[str, float | str]] = field(default_factory=list[dict[str, float | str]])
    """metrics.jsonl's rows, in order: ``kind`` train, val or resume, with ``step`` and the metrics."""
    summary: dict[str, JsonValue] | None = None
    """summary.json; None while the run has not ended (or died before it could write one)."""
    read_at: float = field(default_factory=time.time)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def status(self) -> str:
        """``finished`` or ``failed`` as summary.json says; ``running`` before there is one."""
        if self.summary is None:
            return "running"
        return str(self.summary.get("status", "ended"))

    @property
    def train_curve(self) -> list[Point]:
        """The mean training reward of each step."""
        return _curve(self.rows, "train", "reward_mean")

    @property
    def val_curve(self) -> list[Point]:
        """The mean validation reward at each step it was measured (step 0: before the first update)."""
        return _curve(self.rows, "val", "val_reward_mean")

    @property
    def steps(self) -> int:
        return sum(row["kind"] == "train" for row in self.rows)

    @property
    def wall_seconds(self) -> float | None:
        """How long the run took, or has taken so far when it is still running."""
        if self.summary is not None and isinstance(seconds := self.summary.get("wall_seconds"), int | float):
            return float(seconds)
        if self.started is None:
            return None
        if self.summary is None:
            return max(self.read_at - self.started, 0.0)
        times = [float(time) for row in self.rows if isinstance(time := row.get("time"), int | float)]
        return max(times[-1] - self.started, 0.0) if times else None

    def figures(self) -> dict[str, JsonValue]:
        """The figures runs are compared by: status, steps, first and last rewards, policy version, wall time.

        The validation before training is reported only where one was measured (a step-0 validation).
        """
        train, val = self.train_curve, self.val_curve
        figures: dict[str, JsonValue] = {
            "status": self.status,
            "steps": self.steps,
            "final_reward_mean": train[-1][1] if train else None,
            "initial_val_reward_mean": val[0][1] if val and val[0][0] == 0 else None,
            "final_val_reward_mean": val[-1][1] if val else None,
            "best_val_reward_mean": max(value for _, value in val) if val else None,
            "policy_version": (self.summary or {}).get("policy_version"),
            "wall_seconds": self.wall_seconds,
        }
        return figures


def read_run(path: str | Path) -> RunSnapshot:
    """Read the run folder at ``path`` as it stands now.

    Raises:
        relight.errors.RunFolderError: ``path`` is no run folder (no run.json), its run.json cannot be read,
            or it was written in a layout this relight does not read (the schema and the relight named).
    """
    folder = Path(path)
    record = _run_record(folder)
    identity = _object(record.get("identity"))
    settings: dict[str, JsonValue] = {**identity, **_flat(_object(record.get("settings")))}
    started = record.get("started")
    version = record.get("relight_version")
    return RunSnapshot(
        path=folder.resolve(),
        run_id=str(record["run_id"]),
        started=float(started) if isinstance(started, int | float) else None,
        relight_version=str(version) if version is not None else None,
        settings=settings,
        identity=identity,
        rows=_rows(folder / METRICS_FILE),
        summary=_summary(folder / SUMMARY_FILE),
    )


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """The run folders ``paths`` name: each is a run folder itself, or a folder of them (``runs/``) whose run
    folders are taken in name order (by default, the order they started in).

    Raises:
        relight.errors.RunFolderError: a path does not exist, or is neither a run folder nor holds one.
    """
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise RunFolderError(f"{path} is not a folder: give run folders (runs/<run>) or a folder of them (runs/)")
        if (path / RUN_FILE).exists():
            found.append(path)
            continue
        inside = sorted(child for child in path.iterdir() if (child / RUN_FILE).is_file())
        if not inside:
            raise RunFolderError(f"{path} is not a run folder (it has no {RUN_FILE}) and holds none")
        found += inside
    return found


def _run_record(folder: Path) -> dict[str, JsonValue]:
    path = folder / RUN_FILE
    if not path.is_file():
        raise RunFolderError(
            f"{folder} is not a run folder: it has no {RUN_FILE} (every Trainer.fit writes one when it starts)"
        )
    try:
        record: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RunFolderError(f"{path} cannot be read as JSON: {error}") from error
    if not isinstance(record, dict):
        raise RunFolderError(f"{path} holds {type(record).__name__}, not the JSON object run.json is")
    record = cast(dict[str, JsonValue], record)
    schema = record.get("schema", 1)
    if schema != RUN_SCHEMA:
        writer = record.get("relight_version", "an unknown version")
        raise RunFolderError(
            f"{path} is in run-folder layout {schema!r}, written by relight {writer}; this relight "
            f"({relight_version()}) reads layout {RUN_SCHEMA}: read it with the relight that wrote it"
        )
    missing = [key for key in ("run_id", "identity") if key not in record]
    if missing:
        raise RunFolderError(f"{path} has no {' and no '.join(missing)}: it is not a run.json relight wrote")
    return record


def _rows(path: Path) -> list[dict[str, float | str]]:
    """metrics.jsonl's rows; a line the writer has not finished (or a crash cut short) is left out."""
    if not path.exists():
        return []
    rows: list[dict[str, float | str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "kind" in row:
            rows.append(cast(dict[str, float | str], row))
    return rows


def _summary(path: Path) -> dict[str, JsonValue] | None:
    try:
        summary: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not written yet, or being written (it is written in one go at the end)
        return None
    return cast(dict[str, JsonValue], summary) if isinstance(summary, dict) else None


def _curve(rows: Sequence[Mapping[str, float | str]], kind: str, key: str) -> list[Point]:
    return [
        (float(row["step"]), float(value))
        for row in rows
        if row["kind"] == kind and isinstance(value := row.get(key), int | float) and "step" in row
    ]


def _object(value: JsonValue | None) -> dict[str, JsonValue]:
    return cast(dict[str, JsonValue], value) if isinstance(value, dict) else {}


def _flat(settings: Mapping[str, JsonValue], prefix: str = "") -> dict[str, JsonValue]:
    """Nested settings as dotted keys (``{"algorithm": {"lr": 1e-3}}`` is ``algorithm.lr``), lists kept whole."""
    flat: dict[str, JsonValue] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat |= _flat(cast(dict[str, JsonValue], value), f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
