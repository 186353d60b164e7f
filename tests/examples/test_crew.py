"""The CrewAI crew: the analyst's calculator calls and the reporter's answer offline, with the analyst trained alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from relight.records import SpanKind
from relight_testing.examples import example_file, run_example

pytestmark = [
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]


@pytest.fixture(scope="module")
def crew(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The example, imported with HOME and the XDG folders in a temporary home (CrewAI writes there at import)."""
    home = tmp_path_factory.mktemp("crewai-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        for variable in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            patch.setenv(variable, str(home / variable.lower()))
        patch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
        patch.setenv("CREWAI_TRACING_ENABLED", "false")
        import math_crew

        yield math_crew


async def test_dev_mode_solves_the_problems_and_only_the_analyst_is_trained(dev, crew: ModuleType) -> None:
    from crew_scripted import scripted_model

    math_crew = crew
    tasks = math_crew.load("test")[:4]
    run = await dev(math_crew.solve, tasks, scripted_model, roles=[math_crew.TRAINED_ROLE])
    assert run.rewards == [1.0] * 4
    assert run.roles(SpanKind.ROLE).count("Reporter") == 4
    assert {t.role for t in run.transitions} == {"Analyst"}
    assert {(name, role, ok) for name, role, ok in run.tools()} == {("calculator", "Analyst", True)}
    analyst_calls = run.roles(SpanKind.ROLE).count("Analyst")
    assert len(run.tools()) == 4, "one calculator call per problem"
    assert len(run.transitions) == analyst_calls == 8, "the calculator call, then the result"


def test_the_analysts_one_expression_gives_each_problems_result() -> None:
    from calc_agent import calculator
    from crew_scripted import one_expression

    for line in (
        example_file("scenarios/calc_agent/data/test.jsonl", near=__file__).read_text(encoding="utf-8").splitlines()
    ):
        record = json.loads(line)
        expression = one_expression(record["chain"])
        assert expression is not None
        assert float(calculator(expression)) == float(record["result"]), record["chain"]
    chain = (
        '<gadget id="calculator">384 + 36</gadget><output>420</output> '
        '<gadget id="calculator">420 / 12</gadget><output>35</output> <result>35</result>'
    )
    assert one_expression(chain) == "(384 + 36) / 12"
    assert one_expression("") is None


def test_the_readme_command_runs_offline(tmp_path: Path, crew: ModuleType) -> None:
    rows = run_example(example_file("scenarios/math_crew/math_crew.py", near=__file__), cwd=tmp_path)
    assert len(rows) == 4, rows
    assert all("succeeded" in row and "1.000" in row for row in rows), rows


@pytest.mark.parametrize(
    ("said", "reward"),
    [
        ("Answer: 919", 1.0),
        ("Answer: 1,008", 0.0),
        ("The result is 919.", 1.0),  # what SmolLM2 as the untrained reporter writes: the analyst's sentence
        ("<number>\nThe result is 919.", 1.0),
        ("Answer: 918. The result is 919.", 0.0),  # an Answer: line decides
        ("The shop gets 24 boxes of 42 books, and 89 are damaged.", 0.0),
        ("<number>", 0.0),
    ],
)
def test_the_reward_reads_the_answer_line_else_the_last_number(crew: ModuleType, said: str, reward: float) -> None:
    from crewai import CrewOutput

    assert crew.reward(CrewOutput(raw=said), 919.0) == reward
