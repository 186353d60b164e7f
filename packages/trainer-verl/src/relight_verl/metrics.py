"""What one verl update reports, and where it goes: a JSONL file and verl's tracking backends.

:func:`update_metrics` puts verl's own batch, timing and throughput metrics (computed on the rows
that hold real transitions, not on padding) beside relight's: rewards, the throughput of the whole
loop (rollouts and tokens per second between two updates), and the counts that say nothing was
lost (dropped, padded, retokenized). The actor's loss, KL, entropy and clip fraction come from
verl's workers under ``actor/…``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics

from relight_verl.batch import BatchStats

__all__ = ["HEADLINE", "MetricsLog", "headline", "update_metrics"]

HEADLINE = (
    "reward/train_mean",
    "response_length/mean",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/entropy",
    "actor/entropy_loss",
    "actor/pg_clipfrac",
    "actor/pg_loss",
    "actor/grad_norm",
    "critic/vf_loss",
    "perf/tokens_per_s",
    "perf/rollouts_per_s",
    "relight/trained",
    "relight/padded",
    "relight/dropped",
    "relight/retokenized",
    "timing_s/step",
)
"""The metrics an update reports to the trainer's console; the metrics file and loggers get all ~80."""


def headline(metrics: Mapping[str, float]) -> dict[str, float]:
    """The :data:`HEADLINE` metrics present in ``metrics``, in that order."""
    return {key: metrics[key] for key in HEADLINE if key in metrics}


def update_metrics(
    batch: DataProto,
    stats: BatchStats,
    *,
    timing: Mapping[str, float],
    n_gpus: int,
    use_critic: bool,
    loop_seconds: float,
) -> dict[str, float]:
    """The metrics of one update on ``batch`` (advantages computed), beside relight's counts.

    ``loop_seconds`` is the wall time since the previous update ended: rollouts and training together.
    """
    real = batch.select_idxs(batch.batch["response_mask"].sum(dim=-1) > 0)
    metrics: dict[str, Any] = compute_data_metrics(real, use_critic=use_critic)
    metrics |= compute_timing_metrics(real, dict(timing))
    if "step" in timing:
        metrics |= compute_throughout_metrics(batch, dict(timing), n_gpus)
    metrics |= stats.metrics()
    metrics["reward/train_mean"] = real.batch["token_level_scores"].sum(dim=-1).mean().item()
    if loop_seconds > 0:
        metrics["perf/rollouts_per_s"] = stats.rollouts / loop_seconds
        metrics["perf/tokens_per_s"] = (stats.prompt_tokens + stats.response_tokens) / loop_seconds
    return {key: float(value) for key, value in metrics.items()}


class MetricsLog:
    """Each update's metrics as one JSON line in ``path``, and to verl's tracking backends.

    Args:
        path: the JSONL file (parents are created); None writes none.
        loggers: verl ``Tracking`` backends (``wandb``, ``tensorboard``, ``mlflow``, ``console``, …).
        config: the run's configuration, recorded by backends that keep it (wandb, mlflow).
    """

    def __init__(
        self,
        path: Path | None,
        *,
        loggers: Sequence[str] = (),
        project: str = "relight",
        experiment: str = "run",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = path
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        self._tracking = None
        if loggers:
            from verl.utils.tracking import Tracking

            self._tracking = Tracking(project, experiment, default_backend=list(loggers), config=dict(config or {}))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._file is not None:
            # Strict JSON has no NaN or infinity: write those as null rather than drop the key.
            values = {key: value if math.isfinite(value) else None for key, value in metrics.items()}
            self._file.write(json.dumps({"step": step, **values}) + "\n")
            self._file.flush()
        if self._tracking is not None:
            self._tracking.log(data=dict(metrics), step=step)

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None
