import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from transformers import AutoModelForCausalLM

from relight_testing.examples import assert_verified
from relight_torch.demo.__main__ import main
from relight_torch.demo.calculator import Problem, answer_reward, calculate
from relight_torch.demo.run import Recipe, run_demo


def test_the_calculator_and_the_reward() -> None:
    assert calculate("12 * 7") == "84"
    assert calculate(" 45 - 97") == "-52"
    assert calculate("2 ** 10").startswith("error")
    assert Problem(45, "-", 97).answer == -52
    assert answer_reward("The answer is -52.", -52) == 1.0
    assert answer_reward("52", -52) == 0.0
    assert answer_reward(None, 3) == 0.0


def test_a_miniature_run_writes_the_whole_run_folder(tmp_path: Path) -> None:
    recipe = Recipe(
        demonstrations=20, sft_steps=3, iterations=2, tasks_per_iteration=2, samples_per_task=2, eval_tasks=4
    )
    output = io.StringIO()
    summary = run_demo(recipe, tmp_path, Console(file=output, width=200))

    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == summary
    for key in ("initial_eval_reward", "final_eval_reward", "initial_tool_rate", "final_tool_rate"):
        assert 0.0 <= saved[key] <= 1.0
    assert (saved["iterations"], saved["steps"], saved["status"]) == (2, 2, "finished")
    assert 1 <= saved["policy_version"] <= 3  # the warm start, then one per GRPO update with signal
    assert saved["wall_seconds"] > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(row["kind"], row["step"]) for row in rows] == [("val", 0), ("train", 1), ("train", 2), ("val", 2)]
    assert {"reward_mean", "groups_no_signal", "time_update_s"} <= set(rows[1])
    assert (tmp_path / "reward_curve.png").read_bytes().startswith(b"\x89PNG")
    checkpoints = sorted((tmp_path / "checkpoints").glob("step-*"), key=lambda p: int(p.name.removeprefix("step-")))
    assert len(checkpoints) == saved["policy_version"] - 1, "one checkpoint per update that changed the weights"
    if checkpoints:
        AutoModelForCausalLM.from_pretrained(checkpoints[-1])
    assert str(tmp_path / "summary.json") in output.getvalue()
    assert_verified(tmp_path)  # relight verify finds the tiny model's run clean


def test_the_command_line_takes_the_run_folder(tmp_path: Path) -> None:
    main(
        [
            "--out",
            str(tmp_path),
            "--sft-steps",
            "2",
            "--iterations",
            "1",
            "--tasks",
            "2",
            "--samples",
            "2",
            "--eval-tasks",
            "2",
        ]
    )
    assert json.loads((tmp_path / "summary.json").read_text())["iterations"] == 1


@pytest.mark.slow
def test_the_demo_meets_its_bar(tmp_path: Path) -> None:
    """The README's main command, as shipped: poor before RL, good after (about two minutes on two cores)."""
    summary = run_demo(Recipe(seed=11), tmp_path, Console(file=io.StringIO()))
    assert summary["initial_eval_reward"] <= 0.25
    assert summary["final_eval_reward"] >= 0.8
    assert summary["final_tool_rate"] > summary["initial_tool_rate"]
