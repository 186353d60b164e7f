"""Throughput and losses of a run under real faults: runner processes SIGKILLed, the store server restarted.

Each scenario runs the same rollouts (the three-call async agent through the gateway to a scripted
upstream) with runner processes on ``relight store serve`` over a SQLite file, and reports:

- ``rollouts/s``: rollouts finished per second of wall time;
- ``lost``: rollouts that did not end succeeded (nothing should be lost: every fault is retried);
- ``spans lost``: succeeded attempts missing an LLM or reward span, or holding one twice;
- ``attempts/rollout``: what the faults cost in retries;
- ``kills`` and ``store restarts``: the faults injected.

Scenarios: ``none`` (no fault), ``kill`` (a runner process SIGKILLed every ``--kill-every`` seconds and
replaced, as Trainer's supervisor does), ``restart`` (the store server SIGKILLed and restarted on its
file once, a third of the way through), ``both``.

``trainer`` (its own row): a ``fit`` of relight-torch's tiny model (``tests/resume_fit.py``: a runner
process, the run folder's SQLite store) SIGKILLed in the middle of step 2's rollouts, and the same
command run again until the run finishes. It reports the steps lost (trained, then lost with the
process), the rollouts redone (attempts beyond the first), rollouts lost or trained twice, and the
seconds from running the command again to the run taken up (checkpoint loaded, metrics restored).

    python benchmarks/faults.py            # a table
    python benchmarks/faults.py --json     # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from relight.errors import StoreUnavailableError
from relight.gateway import Gateway
from relight.plugins import open_store
from relight.records import AttemptStatus, Mode, Rollout, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.processes import RunnerProcesses
from relight.runners.supervisor import RunnerSupervisor
from relight.scripted import ScriptedUpstream
from relight.stores.http import HttpStore
from relight.transitions.trained_calls import TRAINED_SPAN
from relight_testing.agents import CALLS, three_calls_async
from relight_testing.faults import StoreServerProcess

SCENARIOS = ("none", "kill", "restart", "both", "trainer")
RESUME_SCRIPT = Path(__file__).parents[1] / "tests" / "resume_fit.py"


@dataclass(frozen=True, slots=True)
class Result:
    scenario: str
    rollouts: int
    seconds: float
    rollouts_per_s: float
    lost: int
    spans_lost: int
    attempts_per_rollout: float
    kills: int
    store_restarts: int


async def scenario(name: str, args: argparse.Namespace, folder: Path) -> Result:
    server = StoreServerProcess(folder / f"{name}.db")
    await asyncio.to_thread(server.start)
    store = HttpStore(server.url)
    kills = restarts = 0
    try:
        async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
            tasks = [RolloutRequest(input={"text": f"{name}-{i}"}, max_attempts=10) for i in range(args.rollouts)]
            ids = [r.rollout_id for r in await store.enqueue(tasks)]
            runners = RunnerProcesses(
                args.runners,
                three_calls_async,
                server.url,
                gateway_url=gateway.url,
                model="scripted",
                concurrency=args.concurrency,
                lease_seconds=args.lease_seconds,
            )
            began = time.perf_counter()
            runners.start()
            supervisor = RunnerSupervisor(runners, store, max_restarts=10_000)
            supervisor.start()
            done = asyncio.Event()

            async def kill_runners() -> None:
                nonlocal kills
                while not done.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), args.kill_every)
                    alive = [p for p in runners.processes if p.is_alive()]
                    if alive and not done.is_set():
                        random.choice(alive).kill()
                        kills += 1

            async def restart_store() -> None:
                nonlocal restarts
                while len([r for r in await wait_through(store, ids, 1.0) if r.is_finished]) < args.rollouts // 3:
                    pass
                server.kill()
                await asyncio.to_thread(server.start)
                restarts += 1

            faults = []
            if name in ("kill", "both"):
                faults.append(asyncio.create_task(kill_runners()))
            if name in ("restart", "both"):
                faults.append(asyncio.create_task(restart_store()))
            try:
                finished = await wait_through(store, ids, args.timeout)
                seconds = time.perf_counter() - began
            finally:
                done.set()
                await asyncio.gather(*faults, return_exceptions=True)
                await supervisor.stop()
                await asyncio.to_thread(runners.stop)
            spans_lost = attempts = 0
            for rollout in finished:
                tried = await store.list_attempts(rollout.rollout_id)
                attempts += len(tried)
                for attempt in tried:
                    if attempt.status is AttemptStatus.SUCCEEDED:
                        spans = await store.query_spans(rollout.rollout_id, attempt.attempt_id)
                        kinds = [span.kind for span in spans]
                        whole = kinds.count(SpanKind.LLM) == CALLS and kinds.count(SpanKind.REWARD) == 1
                        unique = len({span.span_id for span in spans}) == len(spans)
                        spans_lost += not (whole and unique)
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)
    lost = sum(rollout.status is not RolloutStatus.SUCCEEDED for rollout in finished)
    return Result(
        scenario=name,
        rollouts=args.rollouts,
        seconds=round(seconds, 2),
        rollouts_per_s=round(args.rollouts / seconds, 2),
        lost=lost,
        spans_lost=spans_lost,
        attempts_per_rollout=round(attempts / args.rollouts, 3),
        kills=kills,
        store_restarts=restarts,
    )


@dataclass(frozen=True, slots=True)
class TrainerResult:
    scenario: str
    steps: int
    trainer_kills: int
    steps_lost: int
    rollouts_redone: int
    rollouts_lost: int
    trained_twice: int
    seconds_to_resume: float
    """From running the command again to the run taken up: the interpreter, imports, model, checkpoint."""
    checkpoint_load_s: float
    """Of which loading the checkpoint and the metrics (the ``resume`` row's own figure)."""
    seconds: float


def _kill_and_resume(run_dir: Path) -> float:
    """SIGKILL the fit once it holds a rollout of step 2, then run it again to the end; returns when it ran again."""
    command = [sys.executable, str(RESUME_SCRIPT), str(run_dir)]
    env = {**os.environ, "RESUME_HOLD_ROLLOUT": "step2-task1-s1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("HOLDING"):
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()
    again = time.time()
    env.pop("RESUME_HOLD_ROLLOUT")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the resumed run failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return again


async def trainer_scenario(folder: Path) -> TrainerResult:
    """SIGKILL a real fit mid-rollouts, run the same command again, and count what that cost."""
    run_dir = folder / "trainer-run"
    began = time.perf_counter()
    again = await asyncio.to_thread(_kill_and_resume, run_dir)
    seconds = time.perf_counter() - began
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    resumed = [row for row in rows if row["kind"] == "resume"]
    store = open_store(f"sqlite:///{run_dir / 'store.db'}")
    try:
        rollouts = await store.list_rollouts(mode=Mode.TRAIN)
        trained: Counter[str] = Counter()
        for rollout in rollouts:
            for span in await store.query_spans(rollout.rollout_id):
                ids = span.attributes.get("relight.trained.span_ids") if span.name == TRAINED_SPAN else None
                if isinstance(ids, list):
                    trained.update(str(i) for i in ids)
    finally:
        await store.close()
    return TrainerResult(
        scenario="trainer",
        steps=sum(row["kind"] == "train" for row in rows),
        trainer_kills=1,
        steps_lost=int(sum(row["steps_lost"] for row in resumed)),
        rollouts_redone=sum(max(r.attempt_count - 1, 0) for r in rollouts),
        rollouts_lost=sum(r.status is not RolloutStatus.SUCCEEDED for r in rollouts),
        trained_twice=sum(count > 1 for count in trained.values()),
        seconds_to_resume=round(resumed[0]["time"] - again, 2) if resumed else float("nan"),
        checkpoint_load_s=float(resumed[0]["seconds_to_resume"]) if resumed else float("nan"),
        seconds=round(seconds, 1),
    )


async def wait_through(store: HttpStore, ids: list[str], timeout: float) -> list[Rollout]:
    """``store.wait``, going on through a store restart longer than the client's retry budget."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await store.wait(ids, timeout=max(0.0, deadline - time.monotonic()))
        except StoreUnavailableError:
            if time.monotonic() >= deadline:
                raise


async def run(args: argparse.Namespace) -> list[Result | TrainerResult]:
    with tempfile.TemporaryDirectory() as folder:
        return [
            await (trainer_scenario(Path(folder)) if name == "trainer" else scenario(name, args, Path(folder)))
            for name in args.scenarios
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object per line instead of a table")
    parser.add_argument("--rollouts", type=int, default=300, help="rollouts per scenario (default: 300)")
    parser.add_argument("--runners", type=int, default=2, help="runner processes (default: 2)")
    parser.add_argument("--concurrency", type=int, default=16, help="attempts at once per runner (default: 16)")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between runner kills (default: 3)")
    parser.add_argument("--lease-seconds", type=float, default=10.0, help="attempt lease (default: 10)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give a scenario up after this long")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = parser.parse_args()
    everything = asyncio.run(run(args))
    if args.json:
        for result in everything:
            print(json.dumps(asdict(result)))
        return
    results = [r for r in everything if isinstance(r, Result)]
    if results:
        Console().print(fault_table(results))
    for r in everything:
        if isinstance(r, TrainerResult):
            Console().print(trainer_table(r))


def fault_table(results: list[Result]) -> Table:
    table = Table(title="relight under faults (three-call async agent, HTTP store over SQLite)", title_justify="left")
    columns = ("scenario", "rollouts/s", "lost", "spans lost", "attempts/rollout", "kills", "store restarts", "s")
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for r in results:
        table.add_row(
            r.scenario,
            f"{r.rollouts_per_s:.1f}",
            str(r.lost),
            str(r.spans_lost),
            f"{r.attempts_per_rollout:.2f}",
            str(r.kills),
            str(r.store_restarts),
            f"{r.seconds:.1f}",
        )
    return table


def trainer_table(r: TrainerResult) -> Table:
    title = "trainer killed and resumed (tiny relight-torch fit, SIGKILL mid-rollouts)"
    table = Table(title=title, title_justify="left")
    columns = ("steps", "steps lost", "rollouts redone", "lost", "trained twice", "s to resume", "load s", "s")
    for column in columns:
        table.add_column(column, justify="right")
    table.add_row(
        str(r.steps),
        str(r.steps_lost),
        str(r.rollouts_redone),
        str(r.rollouts_lost),
        str(r.trained_twice),
        f"{r.seconds_to_resume:.1f}",
        f"{r.checkpoint_load_s:.2f}",
        f"{r.seconds:.1f}",
    )
    return table


if __name__ == "__main__":
    main()
