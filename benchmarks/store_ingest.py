"""Span ingest and query speed of each store backend: memory, SQLite, PostgreSQL and HTTP (a server over SQLite).

Every span carries ~2 KB of attributes (messages, token ids, logprobs), 40 spans per attempt, as an
LLM-heavy agent produces them. Three ways of adding them, labelled for what they are:

- ``batch``: ``await store.add_spans(<one attempt's 40 spans>)``, one call per attempt.
- ``single``: ``SpanBatcher.submit(span)`` per span, the way tracing and the gateway hand spans over:
  the call returns at once and the batcher writes whatever has gathered in one ``add_spans``.
- ``roundtrip``: ``await store.add_spans([span])`` per span: one transaction, or one HTTP request,
  per span. This is what Agent Lightning 0.3's HTTP store does for every span.

Each figure is the best of ``--repetitions`` runs, the one least disturbed by whatever else the
machine is doing.

The reference figures are Agent Lightning 0.3's on this kind of machine: ~5,000 spans/s in memory
and ~400 spans/s over HTTP (one round trip per span); the goal is at least 10x that, durable, on
SQLite and at least 20x over HTTP. The HTTP server runs in its own process (``relight store serve``)
so client and server do not share one interpreter.

    python benchmarks/store_ingest.py            # a table
    python benchmarks/store_ingest.py --json     # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from _served import served
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from relight import semconv
from relight.records import AttemptStatus, RolloutRequest, Span
from relight.store import Store
from relight.stores.http import HttpStore
from relight.stores.memory import InMemoryStore
from relight.stores.postgres import PostgresStore
from relight.stores.sqlite import SqliteStore
from relight.tracing.batcher import SpanBatcher
from relight_testing.postgres import PostgresServer

SPANS_PER_ATTEMPT = 40
AGENT_LIGHTNING = {"memory": 5_000, "sqlite": 5_000, "postgresql": 5_000, "http": 400}
"""Agent Lightning 0.3's spans/s: in memory (its best local store) and over HTTP, one round trip per span."""
GOAL = {"memory": 10, "sqlite": 10, "postgresql": 10, "http": 20}
MODES = {
    "batch": "await add_spans(40 spans) per attempt",
    "single": "SpanBatcher.submit(span) per span",
    "roundtrip": "await add_spans([span]) per span",
}


@dataclass
class Result:
    backend: str
    mode: str
    how: str
    spans: int
    seconds: float
    spans_per_s: float
    agent_lightning_spans_per_s: int
    times_agent_lightning: float
    query_attempt_p50_ms: float = 0.0
    query_attempt_p95_ms: float = 0.0
    query_rollout_p50_ms: float = 0.0


def make_spans(rollout_id: str, attempt_id: str) -> list[Span]:
    """One attempt's spans, ~2 KB of attributes each."""
    messages = json.dumps(
        [
            {"role": "system", "content": "You are a careful assistant that uses the calculator tool. " * 4},
            {"role": "user", "content": "What is 1234 * 5678? Think step by step, then answer. " * 4},
        ]
    )
    return [
        Span(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            span_id=f"{attempt_id}-{index:04d}",
            trace_id="7" * 32,
            parent_id=None if index == 0 else f"{attempt_id}-0000",
            name="chat tiny-model",
            start_time=1_700_000_000_000_000_000 + index * 1_000_000,
            end_time=1_700_000_000_000_000_000 + index * 1_000_000 + 800_000,
            attributes={
                semconv.SPAN_KIND: "llm",
                semconv.GEN_AI_OPERATION_NAME: "chat",
                semconv.GEN_AI_REQUEST_MODEL: "tiny-model",
                semconv.GEN_AI_RESPONSE_ID: f"chatcmpl-{attempt_id}-{index}",
                semconv.GEN_AI_INPUT_MESSAGES: messages,
                semconv.PROMPT_TOKEN_IDS: list(range(1000 + index, 1120 + index)),
                semconv.RESPONSE_TOKEN_IDS: list(range(2000, 2040)),
                semconv.RESPONSE_LOGPROBS: [-0.123456 - i / 1000 for i in range(40)],
                semconv.POLICY_VERSION: 3,
                semconv.ROLE: "solver/agent",
            },
        )
        for index in range(SPANS_PER_ATTEMPT)
    ]


@asynccontextmanager
async def open_backend(backend: str, folder: Path) -> AsyncIterator[Store]:
    if backend == "memory":
        store: Store = InMemoryStore()
        yield store
        await store.close()
    elif backend == "sqlite":
        store = SqliteStore(folder / "bench.db")
        yield store
        await store.close()
    elif backend == "postgresql":
        # A real server this benchmark starts, fsync on: as durable as SQLite here, or more.
        with PostgresServer(durable=True) as server:
            store = PostgresStore(server.create_database())
            yield store
            await store.close()
    else:
        async with served(f"sqlite:///{folder / 'served.db'}") as url:
            store = HttpStore(url)
            yield store
            await store.close()


async def ingest(store: Store, mode: str, attempts: list[list[Span]]) -> float:
    """Seconds to get every span of ``attempts`` into ``store`` the ``mode`` way."""
    started = time.perf_counter()
    if mode == "batch":
        for spans in attempts:
            await store.add_spans(spans)
    elif mode == "roundtrip":
        for spans in attempts:
            for span in spans:
                await store.add_spans([span])
    else:
        batcher = SpanBatcher(store)
        for spans in attempts:
            for span in spans:
                batcher.submit(span)
            await asyncio.sleep(0)  # an agent yields to the loop between calls; the batcher writes meanwhile
        await batcher.aclose()
        assert batcher.failed == 0, "the batcher could not write every span"
    return time.perf_counter() - started


async def latencies_ms(calls: list[Callable[[], Awaitable[object]]]) -> list[float]:
    times: list[float] = []
    for call in calls:
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def attempts_of(store: Store, task: str, count: int) -> list[tuple[str, str]]:
    """``count`` attempts of one new rollout (the store takes spans only for attempts it has started)."""
    (rollout,) = await store.enqueue([RolloutRequest(input=task, max_attempts=count)])
    ids: list[tuple[str, str]] = []
    for _ in range(count):
        claimed = await store.claim("benchmark")
        assert claimed is not None
        ids.append((rollout.rollout_id, claimed[1].attempt_id))
        if len(ids) < count:
            await store.finish_attempt(rollout.rollout_id, claimed[1].attempt_id, AttemptStatus.FAILED)
    return ids


async def measure(
    backend: str, folder: Path, counts: dict[str, int], repetitions: int, queries: int, progress: Progress
) -> list[Result]:
    """Each mode's best of ``repetitions`` runs (the least disturbed by other work on the machine)."""
    task = progress.add_task(backend, total=sum(counts.values()) * repetitions + queries)
    results: list[Result] = []
    async with open_backend(backend, folder) as store:
        (warm_up,) = await attempts_of(store, "warm-up", 1)
        await store.add_spans(make_spans(warm_up[0], warm_up[1]))
        await store.query_spans(warm_up[0])
        measured: list[tuple[str, str]] = []
        for mode, count in counts.items():
            best = math.inf
            for _ in range(repetitions):
                ids = await attempts_of(store, mode, count // SPANS_PER_ATTEMPT)
                attempts = [make_spans(rollout_id, attempt_id) for rollout_id, attempt_id in ids]
                best = min(best, await ingest(store, mode, attempts))
                assert len(await store.query_spans(ids[0][0])) == count, f"{backend} {mode} lost spans"
                measured.extend(ids)
                progress.advance(task, count)
            rate = count / best
            baseline = AGENT_LIGHTNING[backend]
            results.append(Result(backend, mode, MODES[mode], count, best, rate, baseline, rate / baseline))
        picks = [measured[(i * 7919) % len(measured)] for i in range(queries)]
        by_attempt = await latencies_ms([lambda p=pick: store.query_spans(*p) for pick in picks])
        by_rollout = await latencies_ms([lambda p=pick: store.query_spans(p[0]) for pick in picks[:10]])
        progress.advance(task, queries)
    for result in results:
        result.query_attempt_p50_ms = statistics.median(by_attempt)
        result.query_attempt_p95_ms = statistics.quantiles(by_attempt, n=20)[-1]
        result.query_rollout_p50_ms = statistics.median(by_rollout)
    return results


def show(results: list[Result], console: Console) -> None:
    table = Table(title="span ingest (~2 KB of attributes per span, 40 per attempt)", title_justify="left")
    for column in ("backend", "mode", "spans", "spans/s", "AGL 0.3", "×", "goal"):
        table.add_column(column, justify="left" if column in ("backend", "mode") else "right", no_wrap=True)
    for r in results:
        goal = GOAL[r.backend]
        met = r.times_agent_lightning >= goal
        table.add_row(
            r.backend,
            r.mode,
            f"{r.spans:,}",
            f"{r.spans_per_s:,.0f}",
            f"{r.agent_lightning_spans_per_s:,}",
            f"[{'green' if met else 'yellow'}]{r.times_agent_lightning:.1f}×[/]",
            f"≥{goal}×",
        )
    console.print(table)
    queries = Table(title="query_spans latency", title_justify="left")
    for column in ("backend", "one attempt p50 ms", "p95 ms", "rollout p50 ms"):
        queries.add_column(column, justify="left" if column == "backend" else "right", no_wrap=True)
    for r in results:
        if r.mode == "batch":
            queries.add_row(
                r.backend,
                f"{r.query_attempt_p50_ms:.2f}",
                f"{r.query_attempt_p95_ms:.2f}",
                f"{r.query_rollout_p50_ms:.1f}",
            )
    console.print(queries)
    console.print(
        "\n".join(
            [
                *(f"[bold]{mode}[/]: {escape(how)}" for mode, how in MODES.items()),
                "AGL 0.3: Agent Lightning 0.3's spans/s, ~5,000 in memory and ~400 over HTTP (a round trip per span);",
                "×: ours over theirs for the same backend; goal: ≥10× durable on SQLite, ≥20× over HTTP.",
                "Queries: one attempt's 40 spans, and a whole rollout (every span of one run of a mode).",
            ]
        ),
        highlight=False,
    )


async def run(args: argparse.Namespace) -> list[Result]:
    def whole_attempts(spans: int) -> int:
        return max(1, spans // SPANS_PER_ATTEMPT) * SPANS_PER_ATTEMPT

    counts = {"batch": whole_attempts(args.spans), "single": whole_attempts(args.spans)}
    counts["roundtrip"] = whole_attempts(args.roundtrip_spans)
    console = Console(stderr=args.json)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as folder, Progress(console=console, transient=True) as progress:
        for backend in args.backends:
            results += await measure(backend, Path(folder), counts, args.repetitions, args.queries, progress)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object per line instead of a table")
    parser.add_argument("--spans", type=int, default=4_000, help="spans per run of batch and of single")
    parser.add_argument("--roundtrip-spans", type=int, default=800, help="spans per run of roundtrip")
    parser.add_argument("--repetitions", type=int, default=3, help="runs per mode; the best counts")
    parser.add_argument("--queries", type=int, default=200, help="query_spans calls timed per backend")
    parser.add_argument("--backends", nargs="+", default=["memory", "sqlite", "http"], choices=list(AGENT_LIGHTNING))
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.json:
        for result in results:
            print(json.dumps(asdict(result)))
    else:
        show(results, Console())


if __name__ == "__main__":
    main()
