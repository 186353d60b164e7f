"""Rollouts/s and spans/s with more runner processes, for each way of sharing the store.

Every rollout is a real agent (``relight_testing.agents:three_calls_async``: the openai client, three
chat calls through relight's gateway) answered by an instant model (the scripted upstream), so what
is measured is relight's own cost: claiming, leases, spans, finishing. Runner processes are the real
``RunnerProcesses``. Three stores:

- ``sqlite``: every process opens the same SQLite file (``sqlite:///…``).
- ``http+sqlite``: ``relight store serve`` over a SQLite file, in a process of its own.
- ``http+postgresql``: ``relight store serve`` over a PostgreSQL database (a real server this
  benchmark starts, fsync on), in a process of its own.

For each store, number of runner processes and concurrency per process, the runners are started,
warmed up on a first batch, then timed on ``--rollouts`` rollouts from enqueue until the last has
finished. spans/s counts the spans the store took in that time. Agent Lightning 0.3's changelog
reports 9–57 rollouts/s with 1,000 runners on a 32–64 core VM.

    python benchmarks/scale.py                  # a table
    python benchmarks/scale.py --json           # one JSON object per line
    python benchmarks/scale.py --processes 1 2 --concurrency 8 --stores http+postgresql
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from _served import served
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from relight.gateway import Gateway
from relight.plugins import open_store
from relight.records import RolloutRequest, RolloutStatus
from relight.runners.processes import RunnerProcesses
from relight.scripted import ScriptedUpstream
from relight.store import Store
from relight_testing.agents import three_calls_async
from relight_testing.postgres import PostgresServer, postgres_unavailable

STORES = ("sqlite", "http+sqlite", "http+postgresql")
AGENT_LIGHTNING = "9–57 rollouts/s (1,000 runners, 32–64 cores)"


@dataclass
class Result:
    store: str
    processes: int
    concurrency: int
    rollouts: int
    seconds: float
    rollouts_per_s: float
    spans_per_s: float
    failed: int
    cores: int


@asynccontextmanager
async def store_url(kind: str, folder: Path, postgres: PostgresServer | None) -> AsyncIterator[str]:
    """The URL runner processes, the gateway and this driver share, served by a process of its own where HTTP."""
    database = f"sqlite:///{folder / f'{kind}-{time.monotonic_ns()}.db'}"
    if kind == "sqlite":
        yield database
        return
    if kind == "http+postgresql":
        assert postgres is not None
        database = postgres.create_database()
    async with served(database) as url:
        yield url


async def finish(store: Store, ids: list[str]) -> list[RolloutStatus]:
    """Wait for every rollout; short waits, since a shared SQLite file does not wake this process."""
    while True:
        rollouts = await store.wait(ids, timeout=0.05)
        if all(rollout.is_finished for rollout in rollouts):
            return [rollout.status for rollout in rollouts]


async def measure(
    kind: str, processes: int, concurrency: int, rollouts: int, folder: Path, postgres: PostgresServer | None
) -> Result:
    async with store_url(kind, folder, postgres) as url:
        store = open_store(url)
        try:
            with ScriptedUpstream() as upstream:  # the instant model, on a thread of its own
                async with Gateway(store, [upstream.base_url]) as gateway:
                    runners = RunnerProcesses(
                        processes, three_calls_async, url, gateway_url=gateway.url, model="scripted",
                        concurrency=concurrency, claim_wait_seconds=1.0,
                    )  # fmt: skip
                    runners.start()
                    try:
                        warm = await store.enqueue([RolloutRequest(input={"text": "warm"})] * processes * 2)
                        await finish(store, [r.rollout_id for r in warm])
                        spans_before = (await store.stats()).spans
                        started = time.perf_counter()
                        batch = await store.enqueue([RolloutRequest(input={"text": f"t{i}"}) for i in range(rollouts)])
                        statuses = await finish(store, [r.rollout_id for r in batch])
                        seconds = time.perf_counter() - started
                        await gateway.flush()
                        spans = (await store.stats()).spans - spans_before
                    finally:
                        await asyncio.to_thread(runners.stop)
        finally:
            await store.close()
    failed = sum(status is not RolloutStatus.SUCCEEDED for status in statuses)
    rates = (rollouts / seconds, spans / seconds)
    return Result(kind, processes, concurrency, rollouts, seconds, *rates, failed, os.cpu_count() or 0)


def show(results: list[Result], console: Console) -> None:
    table = Table(
        title=f"rollouts through runner processes ({results[0].cores if results else '?'} cores; instant model)",
        title_justify="left",
    )
    for column in ("store", "processes", "concurrency", "rollouts", "s", "rollouts/s", "spans/s", "failed"):
        table.add_column(column, justify="left" if column == "store" else "right", no_wrap=True)
    for r in results:
        table.add_row(
            r.store,
            str(r.processes),
            str(r.concurrency),
            str(r.rollouts),
            f"{r.seconds:.2f}",
            f"{r.rollouts_per_s:,.1f}",
            f"{r.spans_per_s:,.0f}",
            str(r.failed),
        )
    console.print(table)
    console.print(
        f"Each rollout: three chat calls through the gateway (4 spans). Agent Lightning 0.3: {AGENT_LIGHTNING}.",
        highlight=False,
    )


async def run(args: argparse.Namespace) -> list[Result]:
    console = Console(stderr=args.json)
    postgres: PostgresServer | None = None
    if "http+postgresql" in args.stores:
        reason = postgres_unavailable()
        if reason:
            console.print(f"skipping http+postgresql: {reason}")
            args.stores = [s for s in args.stores if s != "http+postgresql"]
        else:
            postgres = PostgresServer(durable=True).start()
    results: list[Result] = []
    configs = [(s, p, c) for s in args.stores for p in args.processes for c in args.concurrency]
    try:
        with tempfile.TemporaryDirectory() as folder, Progress(console=console, transient=True) as progress:
            task = progress.add_task("scale", total=len(configs))
            for kind, processes, concurrency in configs:
                progress.update(task, description=f"{kind} × {processes} processes × {concurrency}")
                rollouts = max(args.rollouts, processes * concurrency)
                results.append(await measure(kind, processes, concurrency, rollouts, Path(folder), postgres))
                if args.json:
                    print(json.dumps(asdict(results[-1])), flush=True)
                progress.advance(task)
    finally:
        if postgres is not None:
            postgres.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object per line instead of a table")
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    parser.add_argument("--processes", nargs="+", type=int, default=[1, 2, 4, 8], help="runner processes")
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64], help="rollouts at once per process")
    parser.add_argument("--rollouts", type=int, default=200, help="timed rollouts per run (at least one per slot)")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if not args.json:
        console = Console()
        show(results, Console(width=max(console.width, 110)))  # the table whole, even in a narrow log


if __name__ == "__main__":
    main()
