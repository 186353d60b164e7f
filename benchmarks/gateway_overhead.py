"""What the gateway costs per LLM call, and how many rollouts per second the whole loop turns over.

- ``latency``: the same chat request, alternately sent straight to an instant scripted upstream and
  through the gateway (which checks the attempt, forwards with vLLM's fields, mints a response id,
  records the LLM span); ``added_p50_ms``/``added_p99_ms`` are the differences of the percentiles.
  The upstream runs on its own thread, the gateway (with an in-memory store) on the main loop, and
  the client, a plain blocking ``httpx.Client``, on a third thread, so the three do not interleave
  their event loops. Aim: under 0.5 ms added at p50. The long streamed reply (~50 chunks, all ready
  at once) shows what the gateway adds per chunk. ``gateway_cpu_ms_per_call`` is the CPU time of the
  gateway's thread per call (request, forwarding, answer, span): far less sensitive to other load on
  the machine than the latencies, so compare it before and after a change on a busy machine. With
  ``--policies`` the short calls are timed again through a gateway that routes each call to its role's
  policy (several policies, one per role): the call names its role in its ``baggage`` header, and the
  gateway sends it upstream as that policy; ``routed`` rows against the others are what routing adds.
- ``loop``: ``Trainer.fit`` with the instant upstream and an algorithm that learns nothing, so
  everything else is measured: runners, real ``openai`` clients, gateway, store, transitions.
  ``rollouts_per_s`` counts rollouts of three calls each, from enqueue to transitions handed over,
  in the second of two steps (the first warms up processes and connections). The agent runs in the
  trainer's process (async as tasks, sync on threads), or in runner processes (``n_runners``; one
  with ``runner_process=True``), where it does not compete with the gateway and the store for the
  interpreter lock and gets a core of its own. ``profile`` says where the CPU goes over both steps
  (agent/client, gateway, store, runner, trainer, event loop, the fake model; a runner process's
  parts are named ``runner processes: …``): py-spy samples every thread's Python stack 50 times a
  second from outside the processes (py-spy itself uses ~0.15 of a core at 100 a second when it
  follows runner processes, ~0.09 at 50: CPU the loop no longer has), keeps the samples of threads
  the kernel has running or ready to run, and charges each to the part of its innermost frame that
  belongs to one (:mod:`_sampler`, which says why a sampler outside the process is the one that is
  right under uvloop). The shares are of the CPU of all the processes together; a runner process's
  include its start-up (imports).
  Where py-spy may not read the process (ptrace rights), ``profile`` is empty and ``profile_error``
  says why (else it is null). ``cpu_ms_per_rollout`` is the trainer process's CPU time over all of
  ``fit`` per rollout of both steps (``runner_cpu_ms_per_rollout``: the runner processes', their
  start-up included): the fake model's included, and so are start-up and the rest around the steps
  (set-up, first-use imports, checkpoints and reward-curve plots, shut-down), about 1 ms per rollout
  of it. It moves less with the machine's load than the rates do, but it still rises under
  contention (with other work on both cores a step cost 12 to 17 ms per rollout), so
  compare it between runs on an equally busy machine.
- ``forwarder``: the same non-streamed calls through a bare forwarder in the gateway's place: an ASGI
  app on the same server (uvicorn, relight's event loop) that passes the body to the upstream with the
  gateway's HTTP client and returns the answer's bytes, and does nothing else (no attempt check, no
  validation, no span). What it adds is what this stack costs on this machine before the gateway does
  any work of its own: a floor under ``added_p50_ms``.
- ``agent_alone``: the async agent's three calls with its official ``openai`` client straight to the
  instant upstream, nothing of relight around them. Its CPU per rollout is a floor under the loop's
  in one process; ``ceiling_rollouts_per_s`` is what that floor allows.

Every part runs on relight's event loop (:mod:`relight._internal.event_loop`: uvloop where installed; set
``RELIGHT_UVLOOP=0`` to compare with asyncio's).

    python benchmarks/gateway_overhead.py            # a table
    python benchmarks/gateway_overhead.py --json     # one JSON object per line
    python benchmarks/gateway_overhead.py --json --only loop   # only the loop's rows (also: latency, agent_alone)
    python benchmarks/gateway_overhead.py --json --only latency --policies   # with the rows routed by role
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import resource
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
from _sampler import Sampler
from pydantic import JsonValue
from rich.console import Console
from rich.table import Table

from relight import Trainer
from relight._internal import event_loop
from relight._internal.http import HttpClient
from relight._internal.server import AsgiServer
from relight.agent import LLM
from relight.gateway import Gateway
from relight.records import RolloutRequest
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight_testing.agents import CALLS, three_calls, three_calls_async
from relight_testing.algorithms import RecordingAlgorithm

REQUEST = {"model": "scripted", "messages": [{"role": "user", "content": "What is 2 + 2? Answer briefly."}]}
LONG_REPLY = "Four: two and two make four, as counting on your fingers shows. " * 3
"""~190 characters, streamed four to a chunk."""


def _percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _time_calls(
    direct_url: str, gateway_url: str, calls: int, stream: bool, headers: dict[str, str] | None = None
) -> tuple[list[float], list[float]]:
    """Alternate direct and gateway calls (so drift in machine load hits both alike); seconds each."""
    body = {**REQUEST, "stream": stream}
    direct: list[float] = []
    through: list[float] = []
    with httpx.Client(timeout=30, headers=headers) as client:
        for index in range(calls + 50):
            for url, samples in ((direct_url, direct), (gateway_url, through)):
                began = time.perf_counter()
                response = client.post(f"{url}/chat/completions", json=body)
                response.read()
                elapsed = time.perf_counter() - began
                response.raise_for_status()
                if index >= 50:  # warm-up: connections, caches
                    samples.append(elapsed)
    return direct, through


def bare_forwarder(upstream_url: str) -> tuple[Callable[..., Awaitable[None]], HttpClient]:
    """An ASGI app that forwards each request's body to ``upstream_url`` and answers with the reply's bytes."""
    client = HttpClient(upstream_url)

    async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        response = await client.request("POST", "/chat/completions", body, content_type="application/json")
        content = await response.read()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": content})

    return app, client


async def forwarder(calls: int) -> dict[str, Any]:
    """``latency``'s non-streamed calls with :func:`bare_forwarder` in the gateway's place."""
    with ScriptedUpstream.instant() as upstream:
        app, client = bare_forwarder(upstream.base_url)
        async with AsgiServer(app) as server:
            cpu_began = time.thread_time()
            direct, through = await asyncio.to_thread(_time_calls, upstream.base_url, server.url, calls, False)
            cpu = time.thread_time() - cpu_began
        await client.aclose()
    result: dict[str, Any] = {"benchmark": "forwarder", "calls": calls, **_added(direct, through, "forwarder")}
    result["forwarder_cpu_ms_per_call"] = cpu / (calls + 50) * 1e3
    return result


def _added(direct: list[float], through: list[float], via: str) -> dict[str, float]:
    """Percentiles of both paths (``direct_p50_ms``, ``{via}_p50_ms``…) and what ``via`` adds to them."""
    result: dict[str, float] = {}
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        result[f"direct_{name}_ms"] = _percentile(direct, fraction) * 1e3
        result[f"{via}_{name}_ms"] = _percentile(through, fraction) * 1e3
        result[f"added_{name}_ms"] = result[f"{via}_{name}_ms"] - result[f"direct_{name}_ms"]
    result["added_mean_ms"] = (statistics.fmean(through) - statistics.fmean(direct)) * 1e3
    return result


async def latency(calls: int, stream: bool, reply: str = "ok", *, routed: bool = False) -> dict[str, Any]:
    """``routed``: the gateway has two policies, and each call names a role one of them serves (as an
    agent's requests do in a run with ``Trainer(policies=...)``), so it is sent upstream as that policy."""
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="bench")])
    claimed = await store.claim("bench")
    assert claimed is not None
    rollout, attempt = claimed
    policies = {"writer": "write", "checker": "check"} if routed else None
    headers = {"baggage": "relight.role=write_query"} if routed else None
    with ScriptedUpstream.instant(reply) as upstream:
        async with Gateway(store, [upstream.base_url], policies=policies, model=str(REQUEST["model"])) as gateway:
            url = gateway.base_url_for(rollout.rollout_id, attempt.attempt_id)
            cpu_began = time.thread_time()  # this thread runs the gateway (and its span writes), nothing else
            direct, through = await asyncio.to_thread(_time_calls, upstream.base_url, url, calls, stream, headers)
            await gateway.flush()
            cpu = time.thread_time() - cpu_began
    assert (await store.stats()).spans == calls + 50
    result: dict[str, Any] = {
        "benchmark": "latency",
        "stream": stream,
        "routed": routed,
        "reply_chars": len(reply),
        "calls": calls,
    }
    result.update(_added(direct, through, "gateway"))
    result["gateway_cpu_ms_per_call"] = cpu / (calls + 50) * 1e3
    return result


async def loop(rollouts: int, concurrency: int, agent_kind: str, runners: int, runner_process: bool) -> dict[str, Any]:
    """Two training steps over the same tasks; the second is timed (runner processes and clients are warm)."""
    agent = three_calls_async if agent_kind == "async" else three_calls
    with ScriptedUpstream.instant() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            n_runners=runners,
            runner_process=runner_process,
            concurrency=concurrency,
            batch_size=rollouts,
            n_samples=1,
            epochs=2,
            console=Console(file=io.StringIO()),
        )
        tasks: list[JsonValue] = [{"text": f"task-{i}"} for i in range(rollouts)]
        cpu_began, children_began = time.process_time(), _children_cpu()
        with Sampler(50, children="runner processes") as sampler:
            _, timed = await trainer.afit(agent, tasks)
            runner_cpu = _children_cpu() - children_began  # of the runner processes, which have ended: not py-spy yet
        cpu = time.process_time() - cpu_began
    transitions = sum(len(batch) for batch in algorithm.batches)
    assert transitions == 2 * rollouts * CALLS, transitions
    seconds = timed["time_rollouts_s"] + timed["time_update_s"]
    return {
        "benchmark": "loop",
        "agent": agent_kind,
        "runners": runners,
        "runner_process": runner_process or runners > 1,
        "rollouts": rollouts,
        "concurrency": concurrency,
        "rollouts_per_s": rollouts / seconds,
        "calls_per_s": rollouts * CALLS / seconds,
        "seconds": seconds,
        "failed": timed["rollouts_failed"],
        "cpu_ms_per_rollout": cpu / (2 * rollouts) * 1e3,
        "runner_cpu_ms_per_rollout": runner_cpu / (2 * rollouts) * 1e3,
        "profile": sampler.shares(),
        "profile_error": sampler.error,
    }


async def agent_alone(rollouts: int, concurrency: int) -> dict[str, Any]:
    """The async agent of ``loop`` with nothing of relight around it: its official ``openai`` client
    calls the instant upstream directly. Its CPU per rollout (this thread's: the client and the event
    loop it runs on) is a floor under the loop's: one process, which runs Python on one core at a
    time, turns over at most ``ceiling_rollouts_per_s`` = 1000 / that many rollouts per second."""
    with ScriptedUpstream.instant() as upstream:
        llm = LLM(base_url=upstream.base_url, api_key="unused", model="scripted")
        slots = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with slots:
                await three_calls_async({"text": f"task-{index}"}, llm)

        await asyncio.gather(*(one(index) for index in range(concurrency)))  # warm-up: imports, caches
        cpu_began, began = time.thread_time(), time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(rollouts)))
        cpu, seconds = time.thread_time() - cpu_began, time.perf_counter() - began
    cpu_ms = cpu / rollouts * 1e3
    return {
        "benchmark": "agent_alone",
        "rollouts": rollouts,
        "concurrency": concurrency,
        "rollouts_per_s": rollouts / seconds,
        "cpu_ms_per_rollout": cpu_ms,
        "cpu_ms_per_call": cpu_ms / CALLS,
        "ceiling_rollouts_per_s": 1e3 / cpu_ms,
    }


LOOPS = (("async", 1, False), ("async", 1, True), ("sync", 1, False), ("sync", 1, True), ("sync", 2, True))
"""The loop's rows: agent, runners, whether they run in processes of their own (more than one always do)."""


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _runners(row: dict[str, Any]) -> str:
    if not row["runner_process"]:
        return "in process"
    return "1 process" if row["runners"] == 1 else f"{row['runners']} processes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per path (default 1000)")
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts through the loop (default 400)")
    parser.add_argument("--concurrency", type=int, default=32, help="rollouts at once, over all runners (default 32)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of tables")
    parser.add_argument(
        "--policies",
        action="store_true",
        help="also time the short calls through a gateway routing each call to its role's policy",
    )
    parser.add_argument(
        "--only",
        choices=("latency", "agent_alone", "loop"),
        help="run only this benchmark's rows (latency: and the bare forwarder's); needs --json",
    )
    args = parser.parse_args()
    if args.only and not args.json:
        parser.error("--only needs --json")
    console = Console(stderr=args.json)
    wanted = {args.only} if args.only else {"latency", "agent_alone", "loop"}

    results: list[dict[str, Any]] = []
    if "latency" in wanted:
        for stream, reply in ((False, "ok"), (True, "ok"), (True, LONG_REPLY)):
            with console.status(f"latency, stream={stream}, {len(reply)} characters…"):
                results.append(event_loop.run(latency(args.calls, stream, reply)))
        if args.policies:
            for stream in (False, True):
                with console.status(f"latency with role routing, stream={stream}…"):
                    results.append(event_loop.run(latency(args.calls, stream, routed=True)))
        with console.status("a bare forwarder in the gateway's place…"):
            results.append(event_loop.run(forwarder(args.calls)))
    if "agent_alone" in wanted:
        with console.status("the agent alone, straight to the upstream…"):
            results.append(event_loop.run(agent_alone(args.rollouts, args.concurrency)))
    if "loop" in wanted:
        for agent_kind, runners, runner_process in LOOPS:
            where = f"{runners} runner process(es)" if runner_process or runners > 1 else "in the trainer's process"
            with console.status(f"loop, {agent_kind} agent, {where}…"):
                concurrency = args.concurrency // runners
                results.append(event_loop.run(loop(args.rollouts, concurrency, agent_kind, runners, runner_process)))

    if args.json:
        for result in results:
            print(json.dumps(result))
        return
    table = Table(title=f"gateway latency ({args.calls} calls per path, instant upstream)", title_justify="left")
    columns = ("request", "reply", "direct p50", "gateway p50", "added p50", "added p99", "added mean", "gateway CPU")
    for column in columns:
        table.add_column(column, justify="left" if column == "request" else "right")
    for r in (r for r in results if r["benchmark"] == "latency"):
        added = r["added_p50_ms"]
        table.add_row(
            ("chat, streamed" if r["stream"] else "chat") + (", routed by role" if r["routed"] else ""),
            f"{r['reply_chars']} chars",
            f"{r['direct_p50_ms']:.3f} ms",
            f"{r['gateway_p50_ms']:.3f} ms",
            f"[{'green' if added < 1 else 'red'}]{added:.3f} ms[/]",
            f"{r['added_p99_ms']:.3f} ms",
            f"{r['added_mean_ms']:.3f} ms",
            f"{r['gateway_cpu_ms_per_call']:.3f} ms",
        )
    (bare,) = (r for r in results if r["benchmark"] == "forwarder")
    table.add_row(
        "chat, bare forwarder (floor)",
        "2 chars",
        *(f"{bare[key]:.3f} ms" for key in ("direct_p50_ms", "forwarder_p50_ms", "added_p50_ms", "added_p99_ms")),
        *(f"{bare[key]:.3f} ms" for key in ("added_mean_ms", "forwarder_cpu_ms_per_call")),
    )
    console.print(table)
    table = Table(title=f"whole loop ({CALLS} LLM calls per rollout, instant upstream)", title_justify="left")
    columns = ("agent", "runners", "rollouts", "concurrency", "rollouts/s", "calls/s", "CPU/rollout", "failed")
    for column in columns:
        table.add_column(column, justify="right")
    for r in (r for r in results if r["benchmark"] == "loop"):
        cpu = f"{r['cpu_ms_per_rollout']:.1f} ms"
        table.add_row(
            r["agent"],
            _runners(r),
            str(r["rollouts"]),
            str(r["concurrency"]),
            f"{r['rollouts_per_s']:.1f}",
            f"{r['calls_per_s']:.1f}",
            f"{cpu} + {r['runner_cpu_ms_per_rollout']:.1f} ms" if r["runner_process"] else cpu,
            str(int(r["failed"])),
        )
    console.print(table)
    (alone,) = (r for r in results if r["benchmark"] == "agent_alone")
    console.print(
        f"the async agent alone (openai client straight to the upstream): {alone['cpu_ms_per_rollout']:.1f} ms CPU "
        f"per rollout ({alone['cpu_ms_per_call']:.2f} ms per call), so at most "
        f"{alone['ceiling_rollouts_per_s']:.0f} rollouts/s in one process; {alone['rollouts_per_s']:.0f}/s measured"
    )
    loops = [r for r in results if r["benchmark"] == "loop"]
    table = Table(title="where the loop's CPU goes (share of samples of running threads, py-spy)", title_justify="left")
    table.add_column("part")
    for r in loops:
        table.add_column(f"{r['agent']}, {_runners(r)}", justify="right")
    for part in dict.fromkeys(part for r in loops for part in r["profile"]):
        table.add_row(part, *(f"{r['profile'].get(part, 0.0):.0%}" for r in loops))
    console.print(table)
    for error in dict.fromkeys(r["profile_error"] for r in loops if r["profile_error"]):
        console.print(f"[yellow]{error}[/]")


if __name__ == "__main__":
    main()
