"""The LangGraph example runs in dev mode from its README command, offline."""

from __future__ import annotations

from pathlib import Path

from relight_testing.examples import example_file, run_example

EXAMPLE = example_file("frameworks/langgraph/research_graph.py", near=__file__)


def test_the_readme_command_runs_every_task_with_full_reward(tmp_path: Path) -> None:
    rows = run_example(EXAMPLE, cwd=tmp_path)
    assert len(rows) == 3, rows
    assert all("succeeded" in row and "1.000" in row for row in rows), rows


async def test_each_role_reads_its_published_prompt_and_its_default_without_one() -> None:
    from relight_testing.examples import load_example
    from relight_testing.resources import check_published_prompt_is_used

    example = load_example(EXAMPLE)
    await check_published_prompt_is_used(
        example.research,
        example.TASKS[0],
        script=example.scripted_model,
        name="researcher_prompt",
        published="You are the researcher. Compute with the calculator; it never errs.",
        default=example.RESEARCHER_PROMPT,
    )
