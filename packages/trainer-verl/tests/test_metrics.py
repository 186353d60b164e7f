"""An update's metrics: verl's on the real rows, relight's counts and throughput, to a file and to verl's loggers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from verl.trainer.config import AlgoConfig

from relight.records import Transition
from relight_verl.advantages import compute_advantages
from relight_verl.batch import build_batch
from relight_verl.metrics import HEADLINE, MetricsLog, headline, update_metrics


def transition(group: str, prompt: list[int], response: list[int], reward: float, **fields: object) -> Transition:
    return Transition.model_validate(
        {
            "rollout_id": f"ro-{group}-{reward}",
            "attempt_id": "at-1",
            "group_id": group,
            "step": 0,
            "prompt_token_ids": prompt,
            "response_token_ids": response,
            "response_logprobs": [-0.5] * len(response),
            "reward": reward,
            **fields,
        }
    )


def test_update_metrics_leave_out_padding_and_count_what_was_dropped() -> None:
    transitions = [
        transition("g1", [5, 6, 7], [8, 9], 1.0),
        transition("g1", [5], [10, 11, 12], 0.0),
        transition("g2", [1, 2], [3], 0.5, retokenized=True),
        transition("g2", [1], [], 0.5),
    ]
    batch, stats = build_batch(transitions, pad_token_id=0, max_prompt_length=8, max_response_length=8, multiple_of=4)
    assert batch is not None
    compute_advantages(batch, AlgoConfig(adv_estimator="grpo"))
    timing = {"step": 2.0, "adv": 0.1, "update_actor": 1.5}
    metrics = update_metrics(batch, stats, timing=timing, n_gpus=1, use_critic=False, loop_seconds=1.5)

    assert metrics["reward/train_mean"] == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3: the padding row is not a sample
    assert metrics["critic/score/mean"] == pytest.approx(0.5)
    assert metrics["response_length/mean"] == pytest.approx(2.0)
    assert metrics["prompt_length/mean"] == pytest.approx(2.0)
    assert metrics["perf/rollouts_per_s"] == pytest.approx(3 / 1.5)
    assert metrics["perf/tokens_per_s"] == pytest.approx((6 + 6) / 1.5)
    assert metrics["perf/throughput"] == pytest.approx((5 + 4 + 3 + 2) / 2.0)  # every row the GPUs processed
    assert metrics["timing_s/update_actor"] == pytest.approx(1.5)
    assert metrics["timing_per_token_ms/update_actor"] == pytest.approx(1500 / 12)
    assert (metrics["relight/padded"], metrics["relight/dropped_empty"], metrics["relight/retokenized"]) == (1, 1, 1)
    assert all(isinstance(value, float) for value in metrics.values())

    shown = headline(metrics)
    assert list(shown) == [key for key in HEADLINE if key in metrics]
    assert shown["relight/padded"] == 1
    assert "critic/score/mean" not in shown  # in the metrics file, not on the console


def test_metrics_log_writes_json_lines_and_feeds_verls_loggers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    verl_file = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(verl_file))
    log = MetricsLog(tmp_path / "run" / "metrics.jsonl", loggers=["file"], project="p", experiment="e")
    log.log(1, {"reward/train_mean": 0.25, "actor/pg_clipfrac": math.nan})
    log.log(2, {"reward/train_mean": 0.75})
    log.close()
    log.close()

    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 1, "reward/train_mean": 0.25, "actor/pg_clipfrac": None},
        {"step": 2, "reward/train_mean": 0.75},
    ]
    tracked = [json.loads(line) for line in verl_file.read_text().splitlines()]
    assert [(entry["step"], entry["data"]["reward/train_mean"]) for entry in tracked] == [(1, 0.25), (2, 0.75)]
