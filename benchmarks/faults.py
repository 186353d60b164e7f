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

    python benchmarks/faults.py            # a table
    python benchmarks/faults.py --json     # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from relight.errors import StoreUnavailableError
from relight.gateway import Gateway
from relight.records import AttemptStatus, Rollout, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.processes import RunnerProcesses
from relight.runners.supervisor import RunnerSupervisor
from relight.scripted.server import ScriptedUpstream
from relight.stores.http import HttpStore
from relight_testing.agents import CALLS, three_calls_async
from relight_testing.faults import StoreServerProcess

SCENARIOS = ("none", "kill", "restart", "both")


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


async def wait_through(store: HttpStore, ids: list[str], timeout: float) -> list[Rollout]:
    """``store.wait``, going on through a store restart longer than the client's retry budget."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await store.wait(ids, timeout=max(0.0, deadline - time.monotonic()))
        except StoreUnavailableError:
            if time.monotonic() >= deadline:
                raise


async def run(args: argparse.Namespace) -> list[Result]:
    with tempfile.TemporaryDirectory() as folder:
        return [await scenario(name, args, Path(folder)) for name in args.scenarios]


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
    results = asyncio.run(run(args))
    if args.json:
        for result in results:
            print(json.dumps(asdict(result)))
        return
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
    Console().print(table)


if __name__ == "__main__":
    main()
