"""The AutoGen example runs in dev mode from its README command, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "autogen" / "math_team.py"


def test_the_readme_command_runs_both_agents_on_every_task_with_full_reward(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if "ro-" in line]
    assert len(rows) == 6, done.stdout  # the team, then the lone solver
    assert all("succeeded" in row and "1.000" in row for row in rows), done.stdout
