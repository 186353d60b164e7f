"""The calc agent (AutoGen): dev mode offline, its reward, roles and tool spans, and its data loaders."""

from __future__ import annotations

import json
from pathlib import Path

import calc_agent
import calc_data
import pytest
from calc_scripted import scripted_model

from relight.scripted import Reply, ScriptRequest, ToolCall
from relight_testing.examples import example_file, run_example


async def test_dev_mode_solves_every_problem_with_calculator_calls_of_the_solver(dev) -> None:
    tasks = calc_data.load("test")[:6]
    run = await dev(calc_agent.solve, tasks, scripted_model)
    assert run.rewards == [1.0] * 6
    steps = sum(task["level"] for task in tasks)
    assert run.tools() == [("calculator", "solver", True)] * steps
    assert {t.role for t in run.transitions} == {"solver"}
    assert len(run.transitions) == steps + len(tasks), "one call per step, then the answer"


async def test_a_wrong_answer_earns_nothing(dev) -> None:
    task = {**calc_data.load("test")[0], "answer": -1.0}
    run = await dev(calc_agent.solve, [task], scripted_model)
    assert run.rewards == [0.0]


async def test_a_solver_still_calling_the_calculator_when_its_rounds_run_out_earns_nothing(dev) -> None:
    """It must stop by itself: no last call without the calculator lets it answer after it ran out."""
    task = calc_data.load("test")[0]
    offered: list[bool] = []

    def calls_while_it_may(request: ScriptRequest) -> Reply | str:
        offered.append(bool(request.body.get("tools")))
        if offered[-1]:
            return Reply(tool_calls=[ToolCall("calculator", {"expression": "1 + 1"})])
        return f"Answer: {task['answer']:g}"

    run = await dev(calc_agent.solve, [task], calls_while_it_may)
    assert run.rewards == [0.0]
    assert offered == [True] * (calc_agent.MAX_TOOL_ROUNDS + 1)


def test_the_readme_command_runs_offline(tmp_path: Path) -> None:
    rows = run_example(example_file("scenarios/calc_agent/calc_agent.py", near=__file__), cwd=tmp_path)
    assert len(rows) == 6, rows
    assert all("succeeded" in row and "1.000" in row for row in rows), rows


@pytest.mark.parametrize(
    ("text", "number"), [("Answer: 42", 42.0), ("so Answer: 1,234.5", 1234.5), ("Answer: $-7", -7.0), ("42", None)]
)
def test_the_answer_is_the_number_after_the_last_answer_marker(text: str, number: float | None) -> None:
    assert calc_agent.final_answer(text) == number


def test_the_calculator_refuses_anything_but_arithmetic() -> None:
    assert calc_agent.calculator("12 * (3 + 4)") == "84"
    assert calc_agent.calculator("7 / 2") == "3.5"
    with pytest.raises(ValueError, match="not arithmetic"):
        calc_agent.calculator("__import__('os')")


def test_the_shipped_splits_are_what_the_generator_writes_and_share_no_question() -> None:
    train, test = calc_data.load("train"), calc_data.load("test")
    assert (len(train), len(test)) == (calc_data.SPLITS["train"], calc_data.SPLITS["test"])
    assert not {t["question"] for t in train} & {t["question"] for t in test}
    assert [p.as_task() for p in calc_data.generate("test", len(test))] == test
    assert {t["level"] for t in test} == {1, 2, 3}


def test_the_loader_reads_the_real_calc_x_format(tmp_path: Path) -> None:
    """Records shaped as MU-NLPC/Calc-X ships them (calc-gsm8k and calc-ape210k rows)."""
    path = tmp_path / "calc-gsm8k.jsonl"
    records = [
        {"id": "gsm8k__x1", "question": "Weng earns $12 an hour. How much did she earn for 50 minutes?",
         "chain": '<gadget id="calculator">12/60</gadget><output>0.2</output> <gadget id="calculator">0.2*50'
                  "</gadget><output>10</output> <result>10</result>", "result": "10", "result_float": 10.0,
         "source": "gsm8k"},
        {"id": "ape210k__x2", "question": "A third of 0.75 is?", "chain": "", "result": "1/4",
         "result_float": 0.25, "source": "ape210k"},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    problems = calc_data.load_calc_x(path)
    assert [(p.id, p.question[:4], float(p.result), p.level) for p in problems] == [
        ("gsm8k__x1", "Weng", 10.0, 2),
        ("ape210k__x2", "A th", 0.25, 0),
    ]


def test_the_loader_names_the_line_and_field_that_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "result": "10"}\n{"question": "q", "result": "ten"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: 'result' is not a number"):
        calc_data.load_calc_x(path)
    path.write_text('{"result": "1"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: missing the field 'question'"):
        calc_data.load_calc_x(path)
