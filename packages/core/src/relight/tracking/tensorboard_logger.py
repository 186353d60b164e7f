"""TensorBoard event files, written with the ``tensorboard`` package itself (``pip install 'relight[tensorboard]'``)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from relight.tracking._logger import RunInfo

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger:
    """Writes each step's metrics as scalars, and the run's configuration as hyperparameters.

    Args:
        log_dir: where event files go; ``tensorboard/`` in the run folder by default. Point
            ``tensorboard --logdir`` at it (or at a folder above several runs).
    """

    name = "tensorboard"

    def __init__(self, log_dir: str | Path | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.writer: Any = None

    def start(self, run: RunInfo) -> str | None:
        try:
            event_pb2: Any = importlib.import_module("tensorboard.compat.proto.event_pb2")
            summary_v2: Any = importlib.import_module("tensorboard.plugins.hparams.summary_v2")
            summary: Any = importlib.import_module("tensorboard.summary")
            event_files: Any = importlib.import_module("tensorboard.summary.writer.event_file_writer")
        except ImportError as error:
            raise ImportError("the tensorboard logger needs TensorBoard: pip install 'relight[tensorboard]'") from error
        self.log_dir = self.log_dir or run.path / "tensorboard"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        hparams = {key: _hparam(value) for key, value in run.config.items()}
        config = event_files.EventFileWriter(str(self.log_dir), filename_suffix=".config")
        config.add_event(
            event_pb2.Event(wall_time=time.time(), summary=summary_v2.hparams_pb(hparams, trial_id=run.name))
        )
        config.close()
        self.writer = summary.Writer(str(self.log_dir))
        return str(self.log_dir)

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(f"{kind}/{key}", value, step)
        self.writer.flush()

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _hparam(value: JsonValue) -> bool | int | float | str:
    """TensorBoard's hyperparameters are booleans, numbers or text; anything else is shown as its text."""
    if isinstance(value, bool | int | float | str):
        return value
    return "None" if value is None else str(value)
