"""A trainer killed with SIGKILL and started again with the same command finishes the run it was doing.

The ``fit`` is a real process (``tests/resume_fit.py``: relight-torch's tiny model, a runner
process, the run folder's SQLite store); it is killed once while a step's rollouts run and once
inside an update, and each time the same command takes the run up again. The run that survived
both is then held against one that was never killed, and the store against what a run must leave.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("relight_torch", reason="the resume tests train relight-torch's tiny model")

import relight
from relight.records import Mode, SpanKind
from relight.transitions.trained_calls import TRAINED_SPAN

SCRIPT = Path(__file__).with_name("resume_fit.py")
STEPS, TASKS_PER_STEP, SAMPLES = 3, 2, 2

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUME_HOLD_")}
    return {**env, "COLUMNS": "200", **extra}


def fit(run_dir: Path, *args: str, **env: str) -> dict[str, Any]:
    """Run the script to the end; its last line of output is the history."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(run_dir), *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return {"output": done.stdout, "history": json.loads(done.stdout.strip().splitlines()[-1])["history"]}


def fit_killed_at(run_dir: Path, marker: str, **env: str) -> str:
    """Start the script, SIGKILL it as soon as it prints ``marker``; returns what it printed."""
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(run_dir)],
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
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
    return "".join(seen)


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def exact(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A history without what depends on the clock."""
    return [{k: v for k, v in row.items() if not k.startswith("time")} for row in history]


async def store_facts(run_dir: Path) -> tuple[Counter[str], list[str], dict[str, int]]:
    """Training rollouts by status, span ids trained more than once, and each step's rollouts."""
    store = relight.open_store(f"sqlite:///{run_dir / 'store.db'}")
    try:
        rollouts = await store.list_rollouts(mode=Mode.TRAIN)
        statuses = Counter(r.status.value for r in rollouts)
        per_step = Counter(str(r.metadata["step"]) for r in rollouts)
        trained: Counter[str] = Counter()
        for rollout in rollouts:
            for span in await store.query_spans(rollout.rollout_id):
                if span.name == TRAINED_SPAN and span.kind is SpanKind.ANNOTATION:
                    trained.update(str(i) for i in span.attributes["relight.trained.span_ids"])  # type: ignore[union-attr]
        twice = [span_id for span_id, count in trained.items() if count > 1]
        return statuses, twice, dict(per_step)
    finally:
        await store.close()


def checkpoint_weights(run_dir: Path, step: int) -> str:
    manifest = json.loads((run_dir / "checkpoints" / f"step-{step}" / "relight_checkpoint.json").read_text())
    return manifest["files"]["model.safetensors"]["sha256"]


def test_a_fit_killed_mid_rollouts_and_mid_update_resumes_to_the_uninterrupted_run(tmp_path: Path) -> None:
    run = tmp_path / "killed"
    first = fit_killed_at(run, "HOLDING", RESUME_HOLD_ROLLOUT="step2-task1-s1")
    assert "HOLDING step2-task1-s1" in first
    assert [r["step"] for r in rows(run) if r["kind"] == "train"] == [1]

    second = fit_killed_at(run, "UPDATING", RESUME_HOLD_UPDATE="3")
    assert "resuming the run" in second
    assert "from step 1" in second
    assert [r["step"] for r in rows(run) if r["kind"] == "train"] == [1, 2]

    resumed = fit(run)
    assert "from step 2" in resumed["output"]
    reference = fit(tmp_path / "never-killed")

    # The same per-step metrics (all but the timings, exactly) and the same final weights, bit for bit.
    assert exact(resumed["history"]) == exact(reference["history"])
    assert [row["step"] for row in resumed["history"]] == [1, 2, 3]
    assert checkpoint_weights(run, STEPS) == checkpoint_weights(tmp_path / "never-killed", STEPS)

    # One metrics file across both restarts, marked where the run was taken up again.
    kinds = [(r["kind"], r["step"]) for r in rows(run)]
    assert kinds == [("train", 1), ("resume", 1), ("train", 2), ("resume", 2), ("train", 3)]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["resumed_at_steps"]) == ("finished", STEPS, [1, 2])

    # The store: every rollout of every step once, all succeeded, no call trained twice.
    statuses, twice, per_step = asyncio.run(store_facts(run))
    assert statuses == {"succeeded": STEPS * TASKS_PER_STEP * SAMPLES}
    assert per_step == {str(step): TASKS_PER_STEP * SAMPLES for step in range(1, STEPS + 1)}
    assert twice == []

    # Running the finished run again says so instead of training it again.
    again = subprocess.run(
        [sys.executable, str(SCRIPT), str(run)], env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert again.returncode != 0
    assert "already finished" in again.stderr
