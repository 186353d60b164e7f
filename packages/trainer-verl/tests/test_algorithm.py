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


def test_a_checkpoint_loaded_before_start_is_resumed_by_verls_own_resume_path(tmp_path: Path) -> None:
    """A resumed relight fit loads before it asks for upstreams: verl then loads the checkpoint as it starts."""
    checkpoint = tmp_path / "step-3"
    (checkpoint / "global_step_3" / "actor").mkdir(parents=True)
    (checkpoint / "latest_checkpointed_iteration.txt").write_text("3")
    algorithm = VerlAlgorithm(model="m", checkpoint_dir=str(tmp_path / "verl"))
    algorithm.load(checkpoint)
    assert algorithm.config.resume == checkpoint / "global_step_3"
    overrides = algorithm.config.hydra_overrides()
    assert "trainer.resume_mode='resume_path'" in overrides
    assert f"trainer.resume_from_path='{checkpoint / 'global_step_3'}'" in overrides
    with pytest.raises(FileNotFoundError, match="neither a global_step_N checkpoint"):
        algorithm.load(tmp_path / "empty")


def test_several_policies_are_refused_with_the_reason() -> None:
    """verl 0.9 trains and serves one policy per run (README, "Several policies, one per role")."""
    algorithm = VerlAlgorithm(model="m")
    with pytest.raises(TypeError, match=r"one policy, not 2 \(writer, checker\).*max_loras=1"):
        algorithm.set_policies({"writer": "write", "checker": "check"})


@relight.rollout
async def _no_calls(task: object, llm: relight.LLM) -> float:
    return 0.0


def test_a_run_of_several_policies_stops_before_verl_starts(tmp_path: Path) -> None:
    algorithm = VerlAlgorithm(model="m", checkpoint_dir=str(tmp_path / "ckpt"))
    trainer = relight.Trainer(algorithm, policies={"writer": "write", "checker": "check"}, run_dir=tmp_path / "run")
    with pytest.raises(TypeError, match="VerlAlgorithm trains one policy"):
        trainer.fit(_no_calls, [{"question": "q"}])
    assert algorithm._trainer is None  # pyright: ignore[reportPrivateUsage]  # Ray and verl never started
