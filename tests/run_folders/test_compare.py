"""``relight compare`` and the dashboard's compare page, over two real run folders of the tiny model.

The runs differ in their learning rate and their length (two steps and three); a third folder is made to
look like a run still training (no summary.json, its last metrics line half-written); bad folders are refused
with exit status 2 and left as they were.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from relight.cli import main
from relight.dashboard import Dashboard
from relight.dashboard.compared import ComparedRuns
from relight.run_folders import read_run


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def curve(history: list[dict[str, float]], key: str) -> list[list[float]]:
    return [[row["step"], row[key]] for row in history if key in row]


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its SHA-256: what "nothing was changed" is checked against."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def still_running(finished: Path, into: Path) -> Path:
    """A copy of ``finished`` as a fit that is still training leaves it: two steps written, the third half
    written, no summary.json yet."""
    shutil.copytree(finished, into)
    (into / "summary.json").unlink()
    lines = (into / "metrics.jsonl").read_text().splitlines()
    step_two = max(i for i, line in enumerate(lines) if json.loads(line)["step"] == 2)
    (into / "metrics.jsonl").write_text("\n".join(lines[: step_two + 1]) + "\n" + lines[step_two + 1][:25])
    return into


def test_compare_shows_the_settings_that_differ_both_curves_and_writes_the_png(
    two_runs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = fingerprint(two_runs.slow.parent)
    png = tmp_path / "curves.png"
    assert main(["compare", str(two_runs.slow), str(two_runs.fast), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    lr_row = next(line for line in out.splitlines() if "algorithm.lr" in line)
    assert "0.001" in lr_row
    assert "0.01" in lr_row
    assert "finished" in out
    assert f"curves overlaid in {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000

    assert main(["compare", str(two_runs.slow.parent), "--json"]) == 0  # the folder of both runs
    compared = json.loads(capsys.readouterr().out)
    runs = {run["label"]: run for run in compared["runs"]}
    assert set(runs) == {"slow", "fast"}
    for name, history in (("slow", two_runs.slow_history), ("fast", two_runs.fast_history)):
        assert runs[name]["train"] == curve(history, "reward_mean")
        assert runs[name]["val"] == curve(history, "val_reward_mean")
        assert runs[name]["figures"]["status"] == "finished"
        assert runs[name]["figures"]["final_val_reward_mean"] == history[-1]["val_reward_mean"]
        assert runs[name]["figures"]["initial_val_reward_mean"] == history[0]["val_reward_mean"]
        assert runs[name]["figures"]["wall_seconds"] > 0
    assert [len(runs["slow"]["train"]), len(runs["fast"]["train"])] == [2, 3]  # runs of different lengths
    order = [run["label"] for run in compared["runs"]]
    lr = dict(zip(order, compared["differing"]["algorithm.lr"], strict=True))
    assert lr == {"slow": 0.001, "fast": 0.01}
    assert dict(zip(order, compared["differing"]["tasks"], strict=True)) == {"slow": 4, "fast": 6}
    assert compared["shared"]["store"] == "(its own store.db)"  # each run's own store is no difference
    assert compared["shared"]["model"] == "relight-tiny"
    assert compared["shared"]["algorithm.epsilon"] == 0.2
    assert fingerprint(two_runs.slow.parent) == before  # compare reads, and writes only its PNG elsewhere


def test_a_run_still_training_compares_as_far_as_it_got(
    two_runs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = still_running(two_runs.fast, tmp_path / "live")
    assert read_run(live).status == "running"
    assert main(["compare", str(two_runs.slow), str(live), "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    running = compared["runs"][1]
    assert running["figures"]["status"] == "running"
    assert running["figures"]["policy_version"] is None  # only a summary says it
    assert running["train"] == curve(two_runs.fast_history, "reward_mean")[:2]  # the cut line left out
    assert running["figures"]["wall_seconds"] > 0  # so far
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(two_runs.slow), str(live)]) == 0
    out = capsys.readouterr().out
    assert "running" in out
    assert "curves overlaid in compare.png" in out
    assert (tmp_path / "compare.png").is_file()


def test_bad_folders_are_refused_with_2_and_left_as_they_were(
    two_runs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", str(two_runs.slow), str(empty)]) == 2
    assert f"{empty} is not a run folder (it has no run.json) and holds none" in capsys.readouterr().err

    newer = tmp_path / "newer"
    shutil.copytree(two_runs.slow, newer)
    record = json.loads((newer / "run.json").read_text())
    (newer / "run.json").write_text(json.dumps(record | {"schema": 7, "relight_version": "9.0.0"}))
    before = fingerprint(newer)
    assert main(["compare", str(two_runs.slow), str(newer), "--png", str(tmp_path / "no.png")]) == 2
    err = capsys.readouterr().err
    assert "run-folder layout 7, written by relight 9.0.0" in err
    assert "reads layout 1" in err
    assert not (tmp_path / "no.png").exists()
    assert fingerprint(newer) == before

    (newer / "run.json").write_text('{"run_id": "r1", "ident')  # cut short
    assert main(["compare", str(newer)]) == 2
    assert "cannot be read as JSON" in capsys.readouterr().err


@pytest.fixture
async def compare_page(two_runs: Any) -> AsyncIterator[httpx.AsyncClient]:
    runs = ComparedRuns([two_runs.slow.parent])
    async with (
        Dashboard(None, port=0, runs=runs) as dashboard,
        httpx.AsyncClient(base_url=dashboard.url, timeout=30) as http,
    ):
        yield http


async def test_the_dashboard_serves_the_comparison_without_a_store(
    compare_page: httpx.AsyncClient, two_runs: Any
) -> None:
    page = await compare_page.get("/")
    assert 'data-store="off"' in page.text
    assert 'data-runs="on"' in page.text
    compared = (await compare_page.get("/api/runs")).json()
    assert [run["label"] for run in compared["runs"]] == ["fast", "slow"]
    assert compared["differing"]["algorithm.lr"] == [0.01, 0.001]
    assert compared["unreadable"] == []
    missing = await compare_page.get("/api/overview")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": "NotFoundError",
        "detail": "this dashboard shows run folders only: serve it with --store URL to see a store",
    }


def test_the_compare_page_follows_run_folders_as_they_change(two_runs: Any, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copytree(two_runs.slow, root / "slow")
    runs = ComparedRuns([root])
    assert runs.refresh()
    assert runs.version == 1
    assert not runs.refresh()  # nothing moved: nothing read
    with (root / "slow" / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"kind": "train", "step": 3, "reward_mean": 0.9, "time": 1}\n')
    assert runs.refresh()
    assert runs.version == 2
    assert runs.comparison()["runs"][0]["train"][-1] == [3, 0.9]  # type: ignore[index]
    shutil.copytree(two_runs.fast, root / "fast")  # a run started later appears by itself
    assert runs.refresh()
    assert len(runs.comparison()["runs"]) == 2  # type: ignore[arg-type]
    shutil.copytree(two_runs.fast, root / "newer")
    record = json.loads((root / "newer" / "run.json").read_text())
    (root / "newer" / "run.json").write_text(json.dumps(record | {"schema": 9}))
    compared = runs.comparison()
    assert len(compared["runs"]) == 2  # type: ignore[arg-type]
    (unreadable,) = compared["unreadable"]  # type: ignore[misc]
    assert "run-folder layout 9" in unreadable["error"]  # type: ignore[index]


def test_the_dashboard_command_serves_run_folders_alone(two_runs: Any) -> None:
    command = [sys.executable, "-m", "relight.cli", "dashboard", "--runs", str(two_runs.slow.parent), "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert "dashboard of 1 run folder path(s) at http://127.0.0.1:" in line, server.communicate(timeout=30)
            url = line.split(" at ")[-1].strip()
            compared = httpx.get(f"{url}api/runs", timeout=30).json()
            assert sorted(run["label"] for run in compared["runs"]) == ["fast", "slow"]
        finally:
            server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
