"""An APO run killed with SIGKILL and started again with the same command finishes the search it was doing.

The run is a real process (apo_world.py: the scripted agent model and optimiser, the run folder's
SQLite store). It is killed once while the optimiser is answering and once while a candidate's rollouts
run, after its proposal was received; each time the same command takes the search up again, and the
result is held against a run that was never killed: the same prompts found, no rollout run twice, no
proposal asked for again once it had come.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from relight.records import Rollout
from relight.stores.sqlite import SqliteStore

SCRIPT = Path(__file__).with_name("apo_world.py")

pytestmark = pytest.mark.slow


def run(run_dir: Path) -> dict[str, Any]:
    """The script to its end; its last line says what it found."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(run_dir)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def killed_at(run_dir: Path, marker: str, *args: str) -> None:
    """Start the script and SIGKILL it as soon as it prints ``marker``."""
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(run_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        for line in process.stdout:
            seen.append(line)
            if line.startswith(marker):
                process.send_signal(signal.SIGKILL)
                break
        else:
            raise AssertionError(f"the run ended without printing {marker!r}:\n{''.join(seen)[-4000:]}")
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def rollouts(run_dir: Path) -> list[Rollout]:
    async def read() -> list[Rollout]:
        store = SqliteStore(run_dir / "store.db")
        try:
            return await store.list_rollouts()
        finally:
            await store.close()

    return asyncio.run(read())


def steps(run_dir: Path) -> list[tuple[str, int]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["kind"], row["step"]) for row in rows]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    return run(folder), folder


def test_killed_while_the_optimiser_answers_it_asks_again_for_that_round_only(
    uninterrupted: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    found, folder = uninterrupted
    killed_at(tmp_path, "HOLDING optimiser 3", "--hold-round", "3")
    resumed = run(tmp_path)
    assert resumed["best"] == found["best"]
    assert resumed["shown"] == found["shown"][2:], "rounds 1 and 2 were kept; round 3's proposal was asked again"
    assert len(rollouts(tmp_path)) == len(rollouts(folder)), "no rollout was run twice"
    assert [kind for kind, _ in steps(tmp_path)].count("resume") == 1
    assert [step for kind, step in steps(tmp_path) if kind == "train"] == list(range(1, 9))


def test_killed_while_a_candidate_runs_it_keeps_the_proposal_and_the_rollouts_already_run(
    uninterrupted: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    found, folder = uninterrupted
    killed_at(tmp_path, "HOLDING child 3", "--hold-child", "3")
    resumed = run(tmp_path)
    assert resumed["best"] == found["best"]
    assert resumed["shown"] == [], "round 3's proposal had come before the kill: it was not asked for again"
    after = rollouts(tmp_path)
    assert len(after) == len(rollouts(folder))
    (held,) = [r for r in after if r.rollout_id.endswith("-r3-child-t0")]
    assert held.attempt_count == 2, "the rollout the killed run held was tried again once its lease ran out"
    assert [step for kind, step in steps(tmp_path) if kind == "train"] == list(range(1, 9))
