"""MLflow, through its tracking client (``pip install 'relight[mlflow]'``, which installs ``mlflow-skinny``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from relight.tracking._logger import RunInfo

__all__ = ["MlflowLogger"]

_MAX_PARAM_CHARS = 6000
"""MLflow refuses longer parameter values; a longer setting is cut, not lost to an error."""


class MlflowLogger:
    """Logs each step to an MLflow run; the run's configuration becomes its parameters.

    Args:
        tracking_uri: a tracking server (``http://…``), a database (``sqlite:///mlflow.db``, with the
            full ``mlflow``) or a local file store (``file:///…/mlruns``); by default
            ``$MLFLOW_TRACKING_URI``, else a file store ``mlruns`` in the run folder (for which
            ``MLFLOW_ALLOW_FILE_STORE=true`` is set, as MLflow 3 requires).
        experiment: the experiment's name (created when missing).
    """

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, *, experiment: str = "relight") -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.client: Any = None
        self.run_id: str | None = None

    def start(self, run: RunInfo) -> str | None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as error:
            raise ImportError("the mlflow logger needs MLflow: pip install 'relight[mlflow]'") from error
        import os

        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:
            # A file store in the run folder needs no server and no database driver (mlflow-skinny has
            # none); MLflow 3 asks for this switch before it opens one.
            uri = (run.path / "mlruns").as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.tracking_uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(self.experiment)
        created = self.client.create_run(experiment_id, run_name=run.name, tags={"relight.run_dir": str(run.path)})
        self.run_id = created.info.run_id
        from mlflow.entities import Param

        params = [Param(key, str(value)[:_MAX_PARAM_CHARS]) for key, value in run.config.items()]
        self.client.log_batch(self.run_id, params=params)
        if uri.startswith("http"):
            return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{self.run_id}"
        return f"{uri} (experiment {self.experiment}, run {self.run_id})"

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(f"{kind}/{key}", value, now, step) for key, value in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        if self.client is not None and self.run_id is not None:
            status = "FINISHED" if summary.get("status") == "finished" else "FAILED"
            self.client.set_terminated(self.run_id, status=status)
            self.run_id = None
