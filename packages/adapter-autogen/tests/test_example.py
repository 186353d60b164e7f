"""The AutoGen example runs in dev mode from its README command, offline."""

from __future__ import annotations

from pathlib import Path

from relight_testing.examples import example_file, run_example

EXAMPLE = example_file("autogen/math_team.py", near=__file__)


def test_the_readme_command_runs_both_agents_on_every_task_with_full_reward(tmp_path: Path) -> None:
    rows = run_example(EXAMPLE, cwd=tmp_path)
    assert len(rows) == 6, rows  # the team, then the lone solver
    assert all("succeeded" in row and "1.000" in row for row in rows), rows
