"""The tracker protocol, and the set of trackers one run reports to."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import JsonValue

from relight.errors import ConfigError

__all__ = ["LOGGERS_ENV", "ExperimentLogger", "LoggerSet", "RunInfo", "metric_values", "resolve_loggers"]

logger = logging.getLogger(__name__)

LOGGERS_ENV = "RELIGHT_LOGGERS"
"""Comma-separated tracker names used when ``Trainer(loggers=...)`` is not given (``wandb,tensorboard``)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a tracker needs to open its run: a name, the run folder and the run's configuration."""

    name: str
    path: Path
    config: Mapping[str, JsonValue]


@runtime_checkable
class ExperimentLogger(Protocol):
    """One experiment tracker. Methods are called from the training loop, in order: start, log…, finish."""

    name: str
    """How messages name the tracker (``wandb``)."""

    def start(self, run: RunInfo) -> str | None:
        """Open the tracker's run with ``run.config``; return its link or path, which relight prints."""
        ...

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        """One row of ``metrics.jsonl``: ``kind`` is ``train`` or ``val``, ``metrics`` its numbers."""
        ...

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        """Close the run; ``summary`` is what summary.json holds."""
        ...


def metric_values(metrics: Mapping[str, object]) -> dict[str, float]:
    """The row's numbers, less ``step`` (the x axis) and ``time`` (the trackers keep their own)."""
    return {
        key: float(value)
        for key, value in metrics.items()
        if key not in {"step", "time", "kind"} and isinstance(value, int | float) and not isinstance(value, bool)
    }


def resolve_loggers(loggers: Sequence[ExperimentLogger | str] | None) -> list[ExperimentLogger]:
    """Objects as given; names made by the factories plugins registered (``relight_register_loggers``).

    Raises:
        ConfigError: a name no plugin registered.
    """
    if loggers is None:
        loggers = [name.strip() for name in os.environ.get(LOGGERS_ENV, "").split(",") if name.strip()]
    from relight.errors import NotFoundError
    from relight.plugins import registry

    resolved: list[ExperimentLogger] = []
    for item in loggers:
        if isinstance(item, str):
            try:
                resolved.append(registry("loggers").get(item)())
            except NotFoundError as error:
                raise ConfigError(f"loggers: {error}") from None
        else:
            resolved.append(item)
    return resolved


class LoggerSet:
    """The trackers of one run; a tracker that raises is logged once and dropped, never failing the fit."""

    def __init__(self, loggers: Sequence[ExperimentLogger]) -> None:
        self.loggers = list(loggers)

    def start(self, run: RunInfo) -> list[tuple[str, str]]:
        """Open every tracker's run; returns (tracker, link or path) for each that gave one."""
        links: list[tuple[str, str]] = []
        for item in list(self.loggers):
            try:
                link = item.start(run)
            except Exception:
                self._drop(item, "start")
                continue
            if link:
                links.append((item.name, link))
        return links

    def log(self, kind: str, metrics: Mapping[str, object]) -> None:
        step = metrics.get("step")
        values = metric_values(metrics)
        for item in list(self.loggers):
            try:
                item.log(kind, int(step) if isinstance(step, int | float) else 0, values)
            except Exception:
                self._drop(item, "log")

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        for item in list(self.loggers):
            try:
                item.finish(summary)
            except Exception:
                self._drop(item, "finish")

    def _drop(self, item: ExperimentLogger, stage: str) -> None:
        logger.exception("relight: the %s tracker failed in %s; it gets no more metrics this run", item.name, stage)
        self.loggers.remove(item)
