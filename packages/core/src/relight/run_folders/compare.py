"""Several runs side by side: the settings that differ between them, their curves and their final figures.

What ``relight compare`` prints and plots and what the dashboard's compare page shows. Runs of different
lengths and runs still going compare alike: each curve is as long as its run so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from relight.errors import ConfigError
from relight.run_folders.snapshot import RunSnapshot

__all__ = ["OWN_STORE", "RunComparison", "compare_runs"]

OWN_STORE = "(its own store.db)"
"""How a run's store reads when it is the run folder's own: each run has one, so it differs by path alone."""


@dataclass(frozen=True, slots=True)
class RunComparison:
    """Runs in the order given, with a label each (the folder's name, or as much of its path as tells it apart)."""

    runs: tuple[RunSnapshot, ...]
    labels: tuple[str, ...]
    differing: dict[str, list[JsonValue]]
    """Each setting some run has another value of (or lacks), with every run's value (None where it has none)."""
    shared: dict[str, JsonValue]
    """The settings every run has with one value."""

    def figures(self) -> list[dict[str, JsonValue]]:
        """Each run's final figures (:meth:`RunSnapshot.figures`), labelled."""
        return [{"run": label, **run.figures()} for label, run in zip(self.labels, self.runs, strict=True)]

    def to_json(self) -> dict[str, JsonValue]:
        """The comparison as JSON: the dashboard's and ``relight compare --json``'s shape."""
        return {
            "runs": [
                {
                    "label": label,
                    "path": str(run.path),
                    "run_id": run.run_id,
                    "relight_version": run.relight_version,
                    "figures": run.figures(),
                    "train": [[step, value] for step, value in run.train_curve],
                    "val": [[step, value] for step, value in run.val_curve],
                }
                for label, run in zip(self.labels, self.runs, strict=True)
            ],
            "differing": {key: list(values) for key, values in self.differing.items()},
            "shared": dict(self.shared),
        }


def compare_runs(runs: Sequence[RunSnapshot]) -> RunComparison:
    """Line ``runs`` up: which settings differ, and each run's curves and figures.

    Raises:
        relight.ConfigError: no run was given.
    """
    if not runs:
        raise ConfigError("nothing to compare: give at least one run folder")
    settings = [_own_store(run) for run in runs]
    keys = sorted({key for each in settings for key in each})
    differing: dict[str, list[JsonValue]] = {}
    shared: dict[str, JsonValue] = {}
    for key in keys:
        values = [each.get(key) for each in settings]
        if all(key in each for each in settings) and all(value == values[0] for value in values):
            shared[key] = values[0]
        else:
            differing[key] = values
    return RunComparison(tuple(runs), _labels([run.path for run in runs]), differing, shared)


def _own_store(run: RunSnapshot) -> dict[str, JsonValue]:
    """The run's settings, with a store that lives in the run folder named as such rather than by its path."""
    settings = dict(run.settings)
    store = settings.get("store")
    if isinstance(store, str) and str(run.path) in store:
        settings["store"] = OWN_STORE
    return settings


def _labels(paths: Sequence[Path]) -> tuple[str, ...]:
    """The shortest tail of each path (its name, then parent/name, …) that no other path shares."""
    depth = 1
    while True:
        labels = ["/".join(path.parts[-depth:]) for path in paths]
        if len(set(labels)) == len(labels) or depth >= max(len(path.parts) for path in paths):
            return tuple(labels)
        depth += 1
