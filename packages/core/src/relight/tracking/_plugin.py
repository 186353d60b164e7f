"""The built-in trackers, registered through the same hook as a third-party tracker's plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl
from relight.tracking.mlflow_logger import MlflowLogger
from relight.tracking.tensorboard_logger import TensorBoardLogger
from relight.tracking.wandb_logger import WandbLogger


@hookimpl
def relight_register_loggers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("wandb", WandbLogger)
    register("mlflow", MlflowLogger)
    register("tensorboard", TensorBoardLogger)
