"""The examples' shared command line runs its agents offline by default, or against the endpoint it is given."""

from pathlib import Path

import pytest

from relight.scripted import ScriptedUpstream, echo, run_dev_example
from relight.training.dev_report import DevResult
from relight_testing.agents import CALLS, three_calls, three_calls_async
from relight_testing.examples import example_file

TASKS = [{"text": "a"}, {"text": "b"}]


def outcomes(results: list[list[DevResult]]) -> list[list[tuple[float | None, int, int]]]:
    return [[(r.reward, r.calls, r.failed_calls) for r in agent_results] for agent_results in results]


def test_without_a_base_url_each_agent_runs_every_task_against_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    results = run_dev_example(three_calls, three_calls_async, tasks=TASKS, script=echo, argv=[])
    assert outcomes(results) == [[(1.0, CALLS, 0)] * len(TASKS)] * 2
    assert capsys.readouterr().out.count("succeeded") == 2 * 2 * len(TASKS)  # a row as each ends, then the table


def test_with_a_base_url_the_agents_call_that_endpoint() -> None:
    with ScriptedUpstream() as endpoint:
        argv = ["--base-url", endpoint.base_url, "--model", endpoint.model]
        results = run_dev_example(three_calls_async, tasks=TASKS, script=lambda request: "never asked", argv=argv)
        assert len(endpoint.served) == len(TASKS) * CALLS
    assert outcomes(results) == [[(1.0, CALLS, 0)] * len(TASKS)]


def test_a_base_url_without_a_model_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_dev_example(three_calls, tasks=TASKS, script=echo, argv=["--base-url", "http://127.0.0.1:9/v1"])
    assert "--base-url needs --model" in capsys.readouterr().err


def test_a_missing_example_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"examples/nowhere/app\.py"):
        example_file("nowhere/app.py", near=Path(__file__))
