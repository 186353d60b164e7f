"""Synchronous against asynchronous training (``max_staleness`` 1 and 2) for the same number of samples.

The demo's calculator task on the tiny Llama after a short SFT warm start, through the whole stack
(``relight.Trainer`` on relight's event loop, SQLite store, runner, gateway, in-process engine,
GRPO), with an agent whose calculator takes a random 0–200 ms (``tool_seconds``), so rollouts have
a long tail. Every mode starts from the same warm-started weights and seed and trains on the same tasks:

- synchronous: ``Trainer()``; each step waits for its slowest rollout, then updates with the gateway paused.
- ``k=1``, ``k=2``: ``Trainer(max_staleness=k)`` with ``GRPO(live_updates=True, learner_process=True)``:
  rollouts keep running while a copy of the weights is trained in a process of its own (``--learner
  thread``: on a thread of this one), which the engine swaps in between generation steps; stale
  samples get decoupled PPO with truncated importance weights (the default ``tis_cap``).

The clock starts once every mode's parts are up (the engine, and the learner process of the asynchronous
ones: the run waits for it to answer, as a long run would have it) and stops at the last update.

Columns: wall seconds of training, samples (rollouts trained on) per second, the learner's idle fraction
(waiting for a batch), seconds per update, samples dropped for staleness, CPU cores used over the run
(this process and its children: the learner process, runner processes) and by this process alone (the
trainer's: agents, gateway, store and engine share its interpreter, so about one core is its ceiling),
the engine's mean rows per forward pass, and the final greedy reward on held-out questions. The line
under the table is what hiding every update behind rollouts gives, and nothing more: the synchronous
wall over its time waiting for rollouts. Beyond it, asynchrony has to fill idle time within the
rollouts (a long tail that leaves the trainer's process waiting), which there is only when rollouts
are not bound by the CPU the trainer's process gets.

``--engine vllm`` runs the same comparison with the engine in a process of its own: SmolLM2-135M-Instruct
served by a vLLM server relight starts from .venv-vllm (:mod:`relight_torch.vllm`), LoRA adapters trained
by ``VLLMGRPO`` on a thread of this process (``live_updates=True`` in the asynchronous modes: each
version is loaded beside the one serving, calls in flight finish on theirs) and no warm start. Its
questions are sums of two numbers from 2 to 20, not products: SmolLM2 answers products almost never, so
groups would carry no signal and no update would happen. One server serves the three modes (started
before the clock); each mode starts from fresh adapters (zero LoRA delta: the base model) and a fresh
optimizer. Its extra column is the CPU cores the server's processes used over the mode; its
``tokens/step`` column is empty (vLLM does not count it).

    python benchmarks/async_training.py            # a table
    python benchmarks/async_training.py --json     # one JSON object per line
    python benchmarks/async_training.py --runners 2  # agents in two runner processes, in every mode
    python benchmarks/async_training.py --engine vllm --iterations 4 --tasks 4 --samples 4 --eval-tasks 16
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import json
import os
import random
import resource
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict  # pyright: ignore[reportUnknownVariableType]
from rich.console import Console
from rich.table import Table

import relight
from relight._internal import event_loop
from relight_torch.algorithms.grpo import GRPO, UpdateCallback
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import Problem, problems
from relight_torch.demo.run import Recipe, warm_start
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.process import LearnerProcess
from relight_torch.models import smollm2
from relight_torch.models.tiny import tiny_engine
from relight_torch.vllm import VLLMGRPO, VLLMPolicy

TOOL_SECONDS = 0.2


async def train(
    warm: dict[str, torch.Tensor],
    recipe: Recipe,
    max_staleness: int | None,
    store_path: Path,
    *,
    learner_process: bool = True,
    runners: int = 1,
) -> dict[str, Any]:
    """One training run from the warm-started weights; ``max_staleness`` None is synchronous."""
    with tiny_engine(seed=recipe.seed) as engine:
        engine.model.load_state_dict(warm)
        updates: list[float] = []
        live = max_staleness is not None
        algorithm = GRPO(
            engine,
            lr=recipe.lr,
            clip=recipe.clip,
            seed=recipe.seed,
            live_updates=live,
            learner_process=live and learner_process,
            callbacks=[_noting_updates(updates)],
        )
        learner = algorithm.learner
        if isinstance(learner, LearnerProcess):
            learner.state_dict()  # a round trip: the process is up, as the engine is, before the clock
        finish = learner.close if isinstance(learner, LearnerProcess) else None  # reaped: its CPU time counts
        row = await _fit(algorithm, updates, recipe, max_staleness, store_path, runners=runners, finish=finish)
    return row | {"engine_tokens_per_step": round(engine.tokens / max(engine.steps, 1), 1)}


async def train_vllm(
    policy: VLLMPolicy,
    fresh: dict[str, torch.Tensor],
    recipe: Recipe,
    max_staleness: int | None,
    store_path: Path,
    *,
    runners: int = 1,
) -> dict[str, Any]:
    """One training run on the vLLM server from fresh adapters; ``max_staleness`` None is synchronous."""
    from peft import set_peft_model_state_dict  # pyright: ignore[reportUnknownVariableType]

    set_peft_model_state_dict(policy.model, fresh)
    policy.push()  # the fresh adapters serve before the clock starts, under a version of their own
    updates: list[float] = []
    algorithm = VLLMGRPO(
        policy,
        lr=recipe.lr,
        clip=recipe.clip,
        seed=recipe.seed,
        live_updates=max_staleness is not None,
        callbacks=[_noting_updates(updates)],
    )
    server_cpu = _group_cpu_seconds(policy)
    began = time.perf_counter()
    row = await _fit(algorithm, updates, recipe, max_staleness, store_path, runners=runners, sums=True)
    cores = (_group_cpu_seconds(policy) - server_cpu) / (time.perf_counter() - began)
    return row | {"engine_tokens_per_step": None, "engine_server_cores": round(cores, 2)}


async def _fit(
    algorithm: GRPO,
    updates: list[float],
    recipe: Recipe,
    max_staleness: int | None,
    store_path: Path,
    *,
    runners: int,
    sums: bool = False,
    finish: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Train ``algorithm`` through ``relight.Trainer`` and measure it; ``updates`` fills with each update's end."""
    cpu, own = _cpu_seconds(), _cpu_seconds(children=False)
    first_version = algorithm.policy_version
    store = relight.open_store(f"sqlite:///{store_path}")
    in_flight = recipe.tasks_per_iteration * recipe.samples_per_task * ((max_staleness or 0) + 1)
    trainer = relight.Trainer(
        algorithm,
        store=store,
        batch_size=recipe.tasks_per_iteration,
        n_samples=recipe.samples_per_task,
        n_runners=runners,
        concurrency=-(-in_flight // runners),
        max_staleness=max_staleness,
        val_before_fit=False,  # the wall time measured is training's; only the final evaluation is reported
        console=Console(file=io.StringIO()),
    )
    count = recipe.iterations * recipe.tasks_per_iteration
    train_problems = _sums(count, seed=recipe.seed + 1) if sums else problems(count, seed=recipe.seed + 1)
    eval_problems = (
        _sums(recipe.eval_tasks, seed=10_000) if sums else problems(recipe.eval_tasks, seed=10_000, split="eval")
    )
    tasks = [{**p.as_task(), "temperature": 1.0, "tool_seconds": TOOL_SECONDS} for p in train_problems]
    val = [{**p.as_task(), "temperature": 0.0} for p in eval_problems]
    began = time.perf_counter()
    try:
        history = await trainer.afit(calculator_agent, tasks, val)
    finally:
        await store.close()
        if finish is not None:
            finish()
    ended = time.perf_counter()
    steps = [row for row in history if "reward_mean" in row]
    wall = updates[-1] - began
    samples = sum(row["rollouts"] for row in steps)
    if max_staleness is None:
        idle = sum(row["time_rollouts_s"] for row in steps) / wall
        dropped = 0.0
    else:
        idle = steps[-1]["learner_idle_fraction"]
        dropped = steps[-1]["groups_dropped_stale"] * recipe.samples_per_task
    return {
        "benchmark": "async_training",
        "mode": "sync" if max_staleness is None else f"k={max_staleness}",
        "updates": len(steps),
        "versions_pushed": algorithm.policy_version - first_version,
        "samples": samples,
        "wall_s": round(wall, 2),
        "samples_per_s": round(samples / wall, 2),
        "learner_idle_fraction": round(idle, 3),
        "update_s": round(sum(row["time_update_s"] for row in steps) / len(steps), 2),
        "samples_dropped_stale": dropped,
        "cpu_cores_used": round((_cpu_seconds() - cpu) / (ended - began), 2),
        "trainer_process_cores": round((_cpu_seconds(children=False) - own) / (ended - began), 2),
        "train_reward_mean": round(sum(row["reward_mean"] for row in steps[-3:]) / len(steps[-3:]), 3),
        "final_eval_reward": round(history[-1]["val_reward_mean"], 3),
    }


def _noting_updates(updates: list[float]) -> UpdateCallback:
    """A callback that notes when each update ends (the clock stops at the last)."""
    return lambda transitions, metrics: updates.append(time.perf_counter())


def _sums(count: int, *, seed: int) -> list[Problem]:
    """``count`` sums of two numbers from 2 to 20, reproducible from ``seed`` (the vLLM runs' questions).

    Small enough that SmolLM2 gets some right and some wrong: groups with signal, so updates happen
    (two-digit sums gave it about one right answer in twenty-five, most groups none).
    """
    rng = random.Random(seed)
    return [Problem(rng.randint(2, 20), "+", rng.randint(2, 20)) for _ in range(count)]


def _group_cpu_seconds(policy: VLLMPolicy) -> float:
    """CPU seconds of the vLLM server's processes so far (its process group: watchdog, API server, engine)."""
    import psutil

    assert policy.server is not None
    assert policy.server.pid is not None
    total = 0.0
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == policy.server.pid:
                times = process.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def _cpu_seconds(*, children: bool = True) -> float:
    """CPU seconds of this process and (``children``) of its reaped children: a learner process, runner processes."""
    usages = [resource.getrusage(resource.RUSAGE_SELF)]
    if children:
        usages.append(resource.getrusage(resource.RUSAGE_CHILDREN))
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


def warm_weights(recipe: Recipe) -> dict[str, torch.Tensor]:
    """The demo's SFT warm start, once: every mode starts from these weights."""
    engine: TorchEngine
    with tiny_engine(seed=recipe.seed) as engine:
        warm_start(engine, recipe, Console(file=io.StringIO()))
        return copy.deepcopy(engine.model.state_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=12, help="updates per mode (default 12)")
    parser.add_argument("--tasks", type=int, default=16, help="tasks per update (default 16, the demo's)")
    parser.add_argument("--samples", type=int, default=8, help="samples per task (default 8, the demo's)")
    parser.add_argument("--sft-steps", type=int, default=300, help="warm-start steps (default 300, the demo's)")
    parser.add_argument("--eval-tasks", type=int, default=64, help="held-out greedy evaluation tasks (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--learner",
        choices=("process", "thread"),
        default="process",
        help="where asynchronous modes train: a learner process (default) or a thread beside the engine",
    )
    parser.add_argument(
        "--runners", type=int, default=1, help="runner processes in every mode (default 1: agents in this process)"
    )
    parser.add_argument(
        "--engine",
        choices=("torch", "vllm"),
        default="torch",
        help="the tiny model in relight-torch's engine (default), or SmolLM2 with LoRA on a vLLM server",
    )
    parser.add_argument("--lr", type=float, help="the learning rate (default: the demo's; 1e-4 for LoRA on vLLM)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    console = Console(stderr=args.json)
    recipe = Recipe(
        seed=args.seed,
        iterations=args.iterations,
        tasks_per_iteration=args.tasks,
        samples_per_task=args.samples,
        sft_steps=args.sft_steps,
        eval_tasks=args.eval_tasks,
        lr=args.lr or (1e-4 if args.engine == "vllm" else Recipe().lr),
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        run: Callable[[int | None, Path], Coroutine[Any, Any, dict[str, Any]]]
        if args.engine == "vllm":
            with console.status("starting the vLLM server…"):
                policy = VLLMPolicy(smollm2(), work_dir=Path(scratch) / "vllm", seed=recipe.seed)
                stack.callback(policy.close)
                fresh = {name: tensor.clone() for name, tensor in get_peft_model_state_dict(policy.model).items()}
                policy.start()
            run = functools.partial(train_vllm, policy, fresh, recipe, runners=args.runners)
        else:
            with console.status("SFT warm start…"):
                warm = warm_weights(recipe)
            learner_process = args.learner == "process"
            run = functools.partial(train, warm, recipe, learner_process=learner_process, runners=args.runners)
        for k in (None, 1, 2):
            with console.status(f"training, {'synchronous' if k is None else f'max_staleness={k}'}…"):
                row = event_loop.run(run(k, Path(scratch) / f"store-{k}.db"))  # relight's event loop, as fit's
                results.append({**row, "engine": args.engine})
            if args.json:
                print(json.dumps(results[-1]), flush=True)
            else:
                console.print(
                    f"{row['mode']}: {row['samples']} samples in {row['wall_s']} s "
                    f"({row['samples_per_s']} samples/s), final eval reward {row['final_eval_reward']}"
                )
    if args.json:
        return
    model = "SmolLM2-135M, LoRA, vLLM server" if args.engine == "vllm" else "tiny Llama, TorchEngine"
    table = Table(
        title=f"async training: {recipe.iterations} updates × {recipe.tasks_per_iteration} tasks × "
        f"{recipe.samples_per_task} samples, tool 0–{TOOL_SECONDS * 1000:.0f} ms ({model}, CPU)",
        title_justify="left",
    )
    columns = (
        "mode",
        "wall s",
        "samples/s",
        "speed-up",
        "learner idle",
        "update s",
        "dropped",
        "CPU cores",
        "trainer process",
        "tokens/step" if args.engine == "torch" else "server cores",
        "final eval reward",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "mode" else "right")
    base = results[0]["samples_per_s"]
    for row in results:
        table.add_row(
            row["mode"],
            f"{row['wall_s']:.1f}",
            f"{row['samples_per_s']:.2f}",
            f"{row['samples_per_s'] / base:.2f}×",
            f"{row['learner_idle_fraction']:.0%}",
            f"{row['update_s']:.2f}",
            f"{row['samples_dropped_stale']:.0f}",
            f"{row['cpu_cores_used']:.2f}",
            f"{row['trainer_process_cores']:.2f}",
            f"{row['engine_tokens_per_step']:.1f}" if args.engine == "torch" else f"{row['engine_server_cores']:.2f}",
            f"{row['final_eval_reward']:.3f}",
        )
    console.print(table)
    waiting = results[0]["learner_idle_fraction"]  # synchronous: the share of its wall spent waiting for rollouts
    console.print(
        f"Hiding every synchronous update behind rollouts, and nothing more, gives {1 / waiting:.2f}× "
        "(the synchronous wall over its time waiting for rollouts)."
    )


if __name__ == "__main__":
    main()
