"""Experiment trackers: every metric ``fit`` writes to ``metrics.jsonl`` also goes to W&B, MLflow or TensorBoard.

Ask for them by name or as objects::

    Trainer(algorithm, loggers=["tensorboard", WandbLogger(project="agents")])

or with ``RELIGHT_LOGGERS=wandb,mlflow`` when the code passes none. Each logger talks to its
tracker through the tracker's own client library (an extra: ``relight[wandb]``, ``relight[mlflow]``,
``relight[tensorboard]``), receives the run's configuration at start and prints where to look.
Another tracker is a plugin: implement :class:`ExperimentLogger` and register a factory with the
``relight_register_loggers`` hook. A tracker that fails is logged and left out; training goes on.
"""

from relight.tracking._logger import ExperimentLogger, LoggerSet, RunInfo, resolve_loggers
from relight.tracking.mlflow_logger import MlflowLogger
from relight.tracking.tensorboard_logger import TensorBoardLogger
from relight.tracking.wandb_logger import WandbLogger

__all__ = [
    "ExperimentLogger",
    "LoggerSet",
    "MlflowLogger",
    "RunInfo",
    "TensorBoardLogger",
    "WandbLogger",
    "resolve_loggers",
]
