"""The verl algorithm as relight sees it, before any GPU is involved."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import relight
from relight_verl import VerlAlgorithm, VerlConfig


def test_importing_and_configuring_loads_neither_verl_nor_torch_nor_ray() -> None:
    code = (
        "import sys, relight_verl\n"
        "algorithm = relight_verl.VerlAlgorithm(model='Qwen/Qwen2.5-Coder-1.5B-Instruct')\n"
        "assert algorithm.model == 'Qwen/Qwen2.5-Coder-1.5B-Instruct' and algorithm.policy_version == 0\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'verl', 'torch', 'ray', 'vllm'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_it_is_a_relight_algorithm() -> None:
    algorithm = VerlAlgorithm(model="m", served_model_name="coder")
    assert isinstance(algorithm, VerlAlgorithm)
    assert isinstance(algorithm, relight.Algorithm)
    assert algorithm.model == "coder"
    assert algorithm.resources() == {}


def test_checkpoints_go_to_an_absolute_path_and_metrics_beside_them_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # Ray workers run elsewhere: a relative path must not reach them
    algorithm = VerlAlgorithm(model="m", checkpoint_dir="runs/ckpt")
    assert algorithm.config.checkpoint_dir == str(tmp_path / "runs" / "ckpt")
    assert algorithm.metrics_file == tmp_path / "runs" / "ckpt" / "metrics.jsonl"
    assert VerlAlgorithm(model="m", metrics_file=tmp_path / "m.jsonl").metrics_file == tmp_path / "m.jsonl"


def test_a_config_or_its_fields_not_both() -> None:
    with pytest.raises(TypeError, match="not both"):
        VerlAlgorithm(VerlConfig(model="m"), lr=1e-5)
