"""Weights & Biases, through the ``wandb`` client (``pip install 'relight[wandb]'``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from relight.tracking._logger import RunInfo

__all__ = ["WandbLogger"]


class WandbLogger:
    """Logs each step to a W&B run; ``mode="offline"`` writes it under the run folder to ``wandb sync`` later.

    Args:
        project: the W&B project (``$WANDB_PROJECT`` or ``relight`` by default).
        mode: ``online``, ``offline`` or ``disabled``; by default what ``$WANDB_MODE`` says.
        init_options: passed on to ``wandb.init`` (``entity``, ``tags``, ``group``).
    """

    name = "wandb"

    def __init__(self, project: str | None = None, *, mode: str | None = None, **init_options: Any) -> None:
        self.project = project
        self.mode = mode
        self.init_options = init_options
        self.run: Any = None

    def start(self, run: RunInfo) -> str | None:
        try:
            import wandb
        except ImportError as error:
            raise ImportError("the wandb logger needs the W&B client: pip install 'relight[wandb]'") from error
        options: dict[str, Any] = {"name": run.name, "config": dict(run.config), "dir": str(run.path)}
        if self.project is not None:
            options["project"] = self.project
        if self.mode is not None:
            options["mode"] = self.mode
        options.setdefault("project", "relight")
        self.run = wandb.init(**options | self.init_options)
        url = getattr(self.run, "url", None)
        return str(url) if url else str(getattr(self.run, "dir", run.path))

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({f"{kind}/{key}": value for key, value in metrics.items()}, step=step)

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        if self.run is not None:
            self.run.summary.update({f"run/{k}": v for k, v in summary.items() if isinstance(v, int | float | str)})
            self.run.finish()
            self.run = None
