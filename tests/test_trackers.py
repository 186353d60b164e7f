"""A two-step fit of the tiny model reports every metrics.jsonl row to W&B (offline), MLflow (a local file
store) and TensorBoard (event files), each read back through the tracker's own reader."""

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from rich.console import Console

import relight
from relight.tracking import ExperimentLogger, MlflowLogger, RunInfo, WandbLogger, resolve_loggers
from relight_torch.algorithms.grpo import GRPO
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import problems
from relight_torch.models.tiny import tiny_engine

wandb = pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")


def _wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    """The history rows of the offline run's transaction log, then its config, through wandb's own reader."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    store = datastore.DataStore()
    store.open_for_scan(str(log))
    rows: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    try:
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = record.history.item
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
            elif kind == "run":
                config |= {item.key: json.loads(item.value_json) for item in record.run.config.update}
    finally:
        store.close()
    rows.append(config)
    return rows


class Recording:
    """A tracker made by a plugin would be this shape: it sees the same calls as the built-in ones."""

    name = "recording"

    def __init__(self) -> None:
        self.started: RunInfo | None = None
        self.rows: list[tuple[str, int, dict[str, float]]] = []
        self.summary: Mapping[str, JsonValue] | None = None

    def start(self, run: RunInfo) -> str | None:
        self.started = run
        return None

    def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
        self.rows.append((kind, step, dict(metrics)))

    def finish(self, summary: Mapping[str, JsonValue]) -> None:
        self.summary = summary


def test_a_two_step_fit_reaches_wandb_mlflow_and_tensorboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run_dir = tmp_path / "run"
    recording = Recording()
    loggers: list[ExperimentLogger | str] = [
        WandbLogger(project="relight-test", mode="offline"),
        MlflowLogger(experiment="relight-test"),
        "tensorboard",  # by name, as a plugin registered it
        recording,
    ]
    output = io.StringIO()
    with tiny_engine(seed=0) as engine:
        trainer = relight.Trainer(
            GRPO(engine, lr=1e-3),
            batch_size=2,
            n_samples=2,
            concurrency=4,
            run_dir=run_dir,
            loggers=loggers,
            console=Console(file=output, width=400),
        )
        tasks = [{**p.as_task(), "temperature": 1.0} for p in problems(4, seed=0)]
        history = trainer.fit(calculator_agent, tasks, tasks[:2])

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["kind"] == "train"]
    assert [row["step"] for row in train] == [1, 2]
    assert len(history) >= 2
    printed = output.getvalue()
    assert "relight: wandb run at" in printed
    assert "relight: mlflow run at" in printed
    assert f"relight: tensorboard run at {run_dir / 'tensorboard'}" in printed

    # The plugin-shaped tracker got every row, with the run's configuration at the start.
    assert recording.started is not None
    assert recording.started.config["batch_size"] == 2
    assert recording.started.config["algorithm"] == "GRPO"
    assert [(kind, step) for kind, step, _ in recording.rows] == [(row["kind"], row["step"]) for row in rows]
    assert recording.summary is not None
    assert recording.summary["status"] == "finished"

    # W&B: the offline run's log holds each training step's metrics, keyed train/<name>, and the config.
    *wandb_rows, config = _wandb_history(run_dir)
    logged = [row for row in wandb_rows if "train/reward_mean" in row]
    assert [row["_step"] for row in logged] == [1, 2]
    for row, expected in zip(logged, train, strict=True):
        assert row["train/reward_mean"] == pytest.approx(expected["reward_mean"])
    assert config["batch_size"] == 2
    assert config["algorithm"] == "GRPO"

    # MLflow: the local file store's run has each metric's history by step, and the config as parameters.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("relight-test")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["batch_size"] == "2"
    assert run.data.params["algorithm"] == "GRPO"
    rewards = client.get_metric_history(run.info.run_id, "train/reward_mean")
    assert [(m.step, m.value) for m in sorted(rewards, key=lambda m: m.step)] == [
        (row["step"], pytest.approx(row["reward_mean"])) for row in train
    ]

    # TensorBoard: the event files hold each metric as a scalar per step, and the config as hyperparameters.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    assert "train/reward_mean" in accumulator.Tags()["tensors"]
    events = accumulator.Tensors("train/reward_mean")
    from tensorboard.util import tensor_util

    assert [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in events] == [
        (row["step"], pytest.approx(row["reward_mean"])) for row in train
    ]
    assert any(key.startswith("_hparams_") for key in accumulator.summary_metadata)


def test_an_unknown_tracker_name_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(relight.ConfigError, match=r"no logger named 'neptune' .*mlflow, tensorboard, wandb"):
        resolve_loggers(["neptune"])


def test_a_failing_tracker_is_dropped_and_training_goes_on(tmp_path: Path) -> None:
    from relight.tracking import LoggerSet
    from relight.training.run_folder import RunFolder

    class Broken(Recording):
        name = "broken"

        def log(self, kind: str, step: int, metrics: Mapping[str, float]) -> None:
            raise RuntimeError("the tracker's server is down")

    broken, fine = Broken(), Recording()
    run = RunFolder(tmp_path, loggers=LoggerSet([broken, fine]))
    run.record("train", {"step": 1, "reward_mean": 0.5})
    run.record("train", {"step": 2, "reward_mean": 0.75})
    assert fine.rows == [("train", 1, {"reward_mean": 0.5}), ("train", 2, {"reward_mean": 0.75})]
    assert run.loggers.loggers == [fine]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
