"""How fast the dashboard answers on a large store: 100,000 rollouts × 20 spans in SQLite.

The store is filled through the store API as a run would fill it (enqueue, claim, spans, finish):
each rollout has 4 LLM calls (64 response token ids with logprobs, messages) by two roles, their
role spans, 4 tool spans, 6 other spans, a root span and a reward; 2% fail, 1% need a retry, a
tenth are validation rollouts. It is kept in ``--db`` between runs (building it takes minutes).

Then the dashboard serves it over HTTP on loopback and the benchmark measures, with a real client:

- ``open``: opening the store (a file filled before summaries existed gets them here, once) and
  the catalog's first read of every rollout's summary, for the curves (once, at start-up);
- ``list``: the rollout list, a page of 50, under each filter (status, role, group, step, policy
  version, reward, reason, combined) and deep in the list (by offset, and by the keyset cursors the
  page's buttons use), p50/p95/max over ``--requests`` requests each: queries of the store's
  summaries (:mod:`relight.summaries`), never a read of spans;
- ``rollout``: one rollout's page (attempts, span tree, calls, tokens) for random rollouts;
- ``curves``: the runs page's data.

The bar: list and rollout pages under 200 ms at p95.

    python benchmarks/dashboard_load.py                # a table
    python benchmarks/dashboard_load.py --json         # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from pydantic import JsonValue
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from relight import semconv
from relight.dashboard import Dashboard
from relight.records import AttemptStatus, Mode, RolloutRequest, Span, SpanKind
from relight.stores.sqlite import SqliteStore
from relight.transitions.builder import TransitionBuilder

CHUNK = 500
"""Rollouts filled at once: their writes gather into few commits."""
DEEP = 50_000
"""How deep the deep pages lie."""
LIST_QUERIES: dict[str, dict[str, str | int | float]] = {
    "first page": {},
    "status=failed": {"status": "failed"},
    "role=critic": {"role": "critic"},
    "group": {"group_id": "step7-task120"},
    "step=7": {"step": 7},
    "policy_version=3": {"policy_version": 3},
    "reward >= 0.5": {"min_reward": 0.5},
    "reason=filtered role": {"reason": "filtered role"},
    "train, succeeded, reward <= 0.5": {"mode": "train", "status": "succeeded", "max_reward": 0.5},
    f"offset {DEEP:,}": {"offset": DEEP},
    f"cursor at {DEEP:,} (next page)": {"before": "<deep>"},
    f"cursor at {DEEP:,} (page before)": {"after": "<deep>"},
    f"role=critic, cursor at {DEEP:,}": {"role": "critic", "before": "<deep>"},
}
"""The rollout list's queries, each timed on its own: filters, then deep pages by offset and by keyset cursor."""


@dataclass(frozen=True, slots=True)
class Result:
    what: str
    requests: int
    p50_ms: float
    p95_ms: float
    cpu_p50_ms: float
    """The process's CPU time per request (server and client share it), which a loaded machine inflates far less."""
    max_ms: float
    rollouts: int
    spans: int


def _spans(rollout_id: str, attempt_id: str, number: int, rng: random.Random) -> list[Span]:
    """20 spans of one attempt: a root, 4 × (role, LLM, tool), 6 others and a reward."""
    base = 1_700_000_000_000_000_000 + number * 10_000_000_000
    spans: list[Span] = []

    def add(name: str, kind: SpanKind, start: int, end: int, parent: str | None, **attributes: object) -> str:
        span_id = f"{attempt_id}-{len(spans)}"
        spans.append(
            Span.model_validate(
                {
                    "rollout_id": rollout_id,
                    "attempt_id": attempt_id,
                    "span_id": span_id,
                    "trace_id": attempt_id,
                    "parent_id": parent,
                    "name": name,
                    "start_time": base + start,
                    "end_time": base + end,
                    "attributes": {semconv.SPAN_KIND: kind.value, **attributes},
                }
            )
        )
        return span_id

    root = add("rollout", SpanKind.OTHER, 0, 4_000_000_000, None)
    for call in range(4):
        at = 50_000_000 + call * 900_000_000
        role = "solver" if call % 2 == 0 else "critic"
        response_id = f"{attempt_id}-r{call}"
        messages = [{"role": "user", "content": f"question {number} " + "words " * 60}]
        role_span = add(
            f"chat {role}",
            SpanKind.ROLE,
            at,
            at + 600_000_000,
            root,
            **{semconv.ROLE: role, semconv.GEN_AI_RESPONSE_ID: response_id},
        )
        add(
            "chat",
            SpanKind.LLM,
            at + 1_000_000,
            at + 590_000_000,
            role_span,
            **{
                semconv.GEN_AI_RESPONSE_ID: response_id,
                semconv.GEN_AI_INPUT_MESSAGES: json.dumps(messages),
                semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "content": "answer " * 20}]),
                semconv.PROMPT_TOKEN_IDS: [rng.randrange(49_000) for _ in range(96)],
                semconv.RESPONSE_TOKEN_IDS: [rng.randrange(49_000) for _ in range(64)],
                semconv.RESPONSE_LOGPROBS: [round(-rng.random() * 3, 4) for _ in range(64)],
                semconv.POLICY_VERSION: number // 5_000,
            },
        )
        add(
            "execute_tool calculator",
            SpanKind.TOOL,
            at + 600_000_000,
            at + 700_000_000,
            root,
            **{semconv.TOOL_SUCCESS: True, semconv.ROLE: role},
        )
    for other in range(6):
        add(f"step {other}", SpanKind.OTHER, 3_700_000_000 + other, 3_700_000_001 + other, root)
    add("reward", SpanKind.REWARD, 3_900_000_000, 3_900_000_000, root, **{semconv.REWARD: float(rng.random() < 0.4)})
    return spans


async def fill(store: SqliteStore, rollouts: int, console: Console) -> None:
    rng = random.Random(0)
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("filling the store", total=rollouts)
        for start in range(0, rollouts, CHUNK):
            count = min(CHUNK, rollouts - start)
            requests = [
                RolloutRequest(
                    input={"i": i, "question": f"task {i}"},
                    group_id=f"step{i // 2_000}-task{(i // 8) % 250}",
                    mode=Mode.VAL if i % 10 == 9 else Mode.TRAIN,
                    resources_version=i // 5_000,
                    metadata={"step": i // 2_000},
                    max_attempts=2,
                )
                for i in range(start, start + count)
            ]
            await store.enqueue(requests)
            await _run_attempts(store, count, rng)
            progress.update(bar, advance=count)


def _number(task: JsonValue) -> int:
    assert isinstance(task, dict)
    assert isinstance(task["i"], int)
    return task["i"]


async def _run_attempts(store: SqliteStore, count: int, rng: random.Random) -> None:
    """Claim ``count`` queued rollouts (and their retries), write their spans and finish them."""
    remaining = count
    while remaining:
        claims = await asyncio.gather(*(store.claim("bench", lease_seconds=600) for _ in range(remaining)))
        claimed = [c for c in claims if c is not None]
        spans: list[Span] = []
        outcomes: list[tuple[str, str, AttemptStatus]] = []
        for rollout, attempt in claimed:
            number = _number(rollout.input)
            spans += _spans(rollout.rollout_id, attempt.attempt_id, number, rng)
            fails = number % 50 == 7 or (number % 100 == 3 and attempt.number == 1)
            outcomes.append(
                (rollout.rollout_id, attempt.attempt_id, AttemptStatus.FAILED if fails else AttemptStatus.SUCCEEDED)
            )
        await asyncio.gather(*(store.add_spans(spans[i : i + 400]) for i in range(0, len(spans), 400)))
        finished = await asyncio.gather(
            *(
                store.finish_attempt(r, a, s, error="boom" if s is AttemptStatus.FAILED else None)
                for r, a, s in outcomes
            )
        )
        remaining = sum(not rollout.is_finished for rollout in finished)


def _summary(what: str, timings: list[tuple[float, float]], rollouts: int, spans: int) -> Result:
    ordered = sorted(wall for wall, _ in timings)
    return Result(
        what=what,
        requests=len(ordered),
        p50_ms=statistics.median(ordered) * 1e3,
        p95_ms=ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1e3,
        cpu_p50_ms=statistics.median(cpu for _, cpu in timings) * 1e3,
        max_ms=ordered[-1] * 1e3,
        rollouts=rollouts,
        spans=spans,
    )


async def measure(args: argparse.Namespace, console: Console) -> list[Result]:
    path = Path(args.db)
    began, cpu = time.perf_counter(), time.process_time()
    store = SqliteStore(path)
    opened = (time.perf_counter() - began, time.process_time() - cpu)
    try:
        stats = await store.stats()
        if sum(stats.rollouts_by_status.values()) < args.rollouts:
            await fill(store, args.rollouts - sum(stats.rollouts_by_status.values()), console)
            stats = await store.stats()
        rollouts, spans = sum(stats.rollouts_by_status.values()), stats.spans
        async with Dashboard(store, port=0, builder=TransitionBuilder(roles="solver"), interval=3600) as dashboard:
            began, cpu = time.perf_counter(), time.process_time()
            await dashboard.catalog.refresh()
            read = (time.perf_counter() - began, time.process_time() - cpu)
            results = [
                _summary("open the store (once)", [opened], rollouts, spans),
                _summary("read every summary (once, curves)", [read], rollouts, spans),
            ]
            ids = [row.rollout.rollout_id for row in (await store.list_summaries(limit=rollouts)).rows]
            rng = random.Random(1)
            async with httpx.AsyncClient(base_url=dashboard.url, timeout=60) as http:

                async def timed(path: str, params: dict[str, str | int | float] | None = None) -> tuple[float, float]:
                    began, cpu = time.perf_counter(), time.process_time()
                    response = await http.get(path, params=params)
                    took = (time.perf_counter() - began, time.process_time() - cpu)
                    response.raise_for_status()
                    return took

                deep = ids[min(DEEP, len(ids) - 1)]
                lists: dict[str, list[tuple[float, float]]] = {}
                for name, query in LIST_QUERIES.items():
                    params = {key: deep if value == "<deep>" else value for key, value in query.items()}
                    lists[name] = [await timed("/api/rollouts", params) for _ in range(args.requests)]
                pages = [await timed(f"/api/rollouts/{rng.choice(ids)}") for _ in range(args.requests)]
                curves = [await timed("/api/curves") for _ in range(args.requests)]
        return [
            *results,
            *(_summary(f"list: {name}", timings, rollouts, spans) for name, timings in lists.items()),
            _summary("rollout page (20 spans, 4 calls)", pages, rollouts, spans),
            _summary("curves (runs page)", curves, rollouts, spans),
        ]
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object per line instead of a table")
    parser.add_argument("--rollouts", type=int, default=100_000, help="rollouts in the store (default: 100,000)")
    parser.add_argument(
        "--requests", type=int, default=40, help="requests timed per list query and per other endpoint (default: 40)"
    )
    parser.add_argument(
        "--db",
        default=str(Path(tempfile.gettempdir()) / "relight-dashboard-load.db"),
        help="the SQLite store, filled on the first run and reused (default: in the temp folder)",
    )
    args = parser.parse_args()
    console = Console(stderr=args.json)
    results = asyncio.run(measure(args, console))
    if args.json:
        for result in results:
            print(json.dumps(asdict(result)))
        return
    table = Table(
        title=f"dashboard on {results[0].rollouts:,} rollouts, {results[0].spans:,} spans (SQLite)",
        title_justify="left",
    )
    for column in ("what", "requests", "p50 ms", "p95 ms", "max ms", "CPU p50 ms"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for r in results:
        table.add_row(
            r.what, str(r.requests), f"{r.p50_ms:.1f}", f"{r.p95_ms:.1f}", f"{r.max_ms:.1f}", f"{r.cpu_p50_ms:.1f}"
        )
    console.print(table)
    console.print("bar: list and rollout pages under 200 ms at p95", style="dim")


if __name__ == "__main__":
    main()
