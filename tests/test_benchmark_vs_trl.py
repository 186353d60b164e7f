"""benchmarks/vs_trl.py and update_vs_trl.py on the tiny model: TRL's GRPOTrainer and relight (TorchEngine).

Two steps of 2 problems x 2 samples each, so that the benchmark's every part runs (the shared evaluator before
and after, TRL's trainer with and without tools, relight's whole stack, the process tree's memory and CPU) and
cannot drift from the libraries it drives. The figures of the tiny model mean nothing; their presence and
ranges are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # about a minute and a half of CPU; slower when shared

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_trl.py"


def test_vs_trl_trains_the_tiny_model_with_trl_and_with_relight(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--model", "tiny", "--engines", "torch", "--seeds", "0", "--json",
               "--steps", "2", "--prompts", "2", "--samples", "2", "--eval", "2", "--max-new-tokens", "8",
               "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1100, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [(row["framework"], row["task"]) for row in rows] == [
        ("trl", "direct"),
        ("relight-torch", "direct"),
        ("trl", "tools"),
        ("relight-torch", "tools"),
    ]
    for row in rows:
        assert 0.0 <= row["before"] <= 1.0, row
        assert 0.0 <= row["after"] <= 1.0, row
        assert min(row["samples_per_s"], row["samples_per_cpu_s"], row["train_s"]) > 0, row
        assert row["peak_gb"] > 0.1, row
        assert (row["budget"]["steps"], row["weights"]) == (2, "full"), row
    trl = [row for row in rows if row["framework"] == "trl"]
    assert all(row["trained_samples"] == 8 and row["update_s_per_sample"] > 0 for row in trl)  # TRL trains all 2x2x2
    run = tmp_path / "relight-torch-direct-seed0" / "relight"
    assert (run / "metrics.jsonl").exists()  # relight's own run folder, its record kept
    assert not (run / "checkpoints").exists()  # and its weights removed once the run finished


def test_update_vs_trl_measures_one_update_of_each_variant(tmp_path: Path) -> None:
    script = SCRIPT.with_name("update_vs_trl.py")
    command = [sys.executable, str(script), "--model", "tiny", "--prompts", "2", "--samples", "2", "--repeats", "1",
               "--profile", "--json", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1100, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [row["variant"] for row in rows] == ["relight", "relight-heap", "trl"]
    for row in rows:
        assert (row["samples"], row["repeats"]) == (4, 1), row
        assert min(row["wall_s"], row["user_s"], row["minor_faults"]) > 0, row
        assert row["peak_rss_gb"] > 0.1, row
        assert "aten::mm" in (tmp_path / f"{row['variant']}-profile.txt").read_text(), row  # the profile's operators
