"""The demo, start to finish: warm start, RL through the whole of relight, evaluation, the run folder.

1. A tiny Llama and tokenizer are built from nothing (seeded).
2. SFT on demonstrations that mostly answer from memory: the policy learns the format and how to
   copy numbers, but its habit is to skip the tool, so its greedy reward starts low.
3. GRPO through the real stack: ``relight.Trainer.fit`` enqueues rollouts in a SQLite store;
   the runner runs :func:`~relight_torch.demo.agent.calculator_agent`, whose ``openai`` client
   talks to the gateway; the gateway forwards each call to the engine and records it as a span;
   finished rollouts become transitions; :class:`~relight_torch.GRPO` updates the weights the
   engine serves.
4. Greedy evaluation before and after (the trainer's validation rollouts), read back from the store.

The run folder is the trainer's (:mod:`relight.training.run_folder`), as for any ``fit``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from pydantic import JsonValue
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import relight
from relight.records import Mode, RolloutStatus, SpanKind
from relight.store import Store
from relight.training.run_folder import RunFolder
from relight.transitions.builder import episode_return
from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.sft import SFT, conversation_samples
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import TOOLS, demonstration, problems
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine
from relight_torch.recipes.warm_start_grpo import Recipe as ExampleRecipe

__all__ = ["Recipe", "run_demo", "warm_start"]


@dataclass(frozen=True, slots=True)
class Recipe(ExampleRecipe):
    """Everything that decides the demo's outcome; the defaults are the tested recipe.

    The examples' :class:`relight_torch.recipes.warm_start_grpo.Recipe`, with the tiny model's own defaults: its
    demonstrations are written here (``demonstrations`` of them), not recorded from scripted runs.
    """

    demonstrations: int = 3000
    tool_fraction: float = 0.2
    """Share of demonstrations that use the calculator; the rest answer from memory."""
    sft_steps: int = 300
    sft_batch_size: int = 32
    sft_lr: float = 3e-3
    iterations: int = 20
    tasks_per_iteration: int = 16
    samples_per_task: int = 8
    lr: float = 5e-4
    eval_tasks: int = 64
    token_budget: int = 4096


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One round of greedy validation rollouts."""

    reward: float
    tool_rate: float
    episodes: int


def run_demo(recipe: Recipe, out: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the demo into the run folder ``out`` and return the summary it wrote there.

    The folder is :meth:`relight.Trainer.fit`'s own (metrics, reward curve, checkpoints, store);
    the demo adds its evaluation before and after to ``summary.json``.
    """
    console = console or Console()
    began = time.perf_counter()
    random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    engine = tiny_engine(seed=recipe.seed)
    console.print(
        f"[bold]relight demo[/]: a calculator agent on a {_millions(engine.model)}M-parameter Llama, seed {recipe.seed}"
    )
    try:
        warm_start(engine, recipe, console)
        algorithm = recipe.grpo(engine)
        initial, final = asyncio.run(_reinforce(algorithm, recipe, out, console))
    finally:
        engine.close()
    summary = RunFolder(out).add_to_summary(
        {
            "initial_eval_reward": initial.reward,
            "final_eval_reward": final.reward,
            "initial_tool_rate": initial.tool_rate,
            "final_tool_rate": final.tool_rate,
            "iterations": recipe.iterations,
            "wall_seconds": round(time.perf_counter() - began, 1),
            "eval_episodes": final.episodes,
            "recipe": cast(JsonValue, asdict(recipe)),
        }
    )
    _print_summary(console, summary)
    return summary


async def _reinforce(algorithm: GRPO, recipe: Recipe, out: Path, console: Console) -> tuple[Evaluation, Evaluation]:
    """GRPO through relight's trainer, runner, gateway and store; returns the greedy evaluations before and after."""
    trainer = recipe.trainer(algorithm, run_dir=out, console=console)
    count = recipe.iterations * recipe.tasks_per_iteration
    train = [{**p.as_task(), "temperature": recipe.train_temperature} for p in problems(count, seed=recipe.seed + 1)]
    val = [{**p.as_task(), "temperature": 0.0} for p in problems(recipe.eval_tasks, seed=10_000, split="eval")]
    await trainer.afit(calculator_agent, train, val)
    store = relight.open_store(RunFolder(out).store_url)
    try:
        return await _evaluations(store)
    finally:
        await store.close()


def warm_start(engine: TorchEngine, recipe: Recipe, console: Console) -> None:
    """SFT on the recipe's demonstrations, most of which answer without the calculator."""
    sft = SFT(engine, lr=recipe.sft_lr, seed=recipe.seed)
    rng = random.Random(recipe.seed)
    conversations = [
        {"messages": demonstration(p, use_tool=rng.random() < recipe.tool_fraction), "tools": TOOLS}
        for p in problems(recipe.demonstrations, seed=recipe.seed + 2)
    ]
    samples = conversation_samples(sft.engine.tokenizer, conversations)
    with _progress(console) as progress:
        bar = progress.add_task("SFT warm start", total=recipe.sft_steps, info="")
        sft.fit(
            samples,
            steps=recipe.sft_steps,
            batch_size=recipe.sft_batch_size,
            on_step=lambda step, loss: progress.update(bar, completed=step + 1, info=f"loss {loss:.3f}"),
        )


async def _evaluations(store: Store) -> tuple[Evaluation, Evaluation]:
    """The first and last greedy evaluations, from the validation rollouts the store kept."""
    rounds: defaultdict[int, list[tuple[float, bool]]] = defaultdict(list)
    for rollout in await store.list_rollouts(mode=Mode.VAL):
        if rollout.status is not RolloutStatus.SUCCEEDED:
            rounds[rollout.resources_version or 0].append((0.0, False))
            continue
        attempt = (await store.list_attempts(rollout.rollout_id))[-1]
        spans = await store.query_spans(rollout.rollout_id, attempt.attempt_id)
        calls = sum(span.kind is SpanKind.LLM for span in spans)
        rounds[rollout.resources_version or 0].append((episode_return(spans) or 0.0, calls > 1))
    first, last = rounds[min(rounds)], rounds[max(rounds)]
    return _evaluation(first), _evaluation(last)


def _evaluation(results: list[tuple[float, bool]]) -> Evaluation:
    return Evaluation(
        reward=statistics.fmean(r for r, _ in results),
        tool_rate=statistics.fmean(t for _, t in results),
        episodes=len(results),
    )


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    )


def _print_summary(console: Console, summary: Mapping[str, Any]) -> None:
    console.print(
        f"greedy eval reward {summary['initial_eval_reward']:.2f} → [bold]{summary['final_eval_reward']:.2f}[/], "
        f"tool use {summary['initial_tool_rate']:.2f} → {summary['final_tool_rate']:.2f}, "
        f"{summary['iterations']} iterations, {summary['wall_seconds']:.0f} s, policy v{summary['policy_version']}"
    )
    out = Path(str(summary["run_dir"]))
    for name in ("summary.json", "metrics.jsonl", "reward_curve.png", "checkpoints", "store.db"):
        console.print(f"  {out / name}", highlight=False, soft_wrap=True)


def _millions(model: torch.nn.Module) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}"
