"""How fast the demo trains: LLM calls per second through the whole stack, and seconds per GRPO update.

The demo's own pieces: the tiny model after a short SFT warm start (so replies are as short as the
demo's), the calculator agent with the ``openai`` client, ``relight.Trainer`` with a SQLite store,
the gateway and the in-process engine, and GRPO on 16 tasks × 8 samples per iteration.

- ``calls_per_s``: LLM calls answered per second of rollout time (enqueue → transitions), over the
  iterations after the first (which warms up imports and connections).
- ``update_s``: seconds per GRPO update (advantages, forward/backward, the optimizer step).
- ``batch_mean``: sequences per engine batch, i.e. how well concurrent rollouts share a forward pass.

    python benchmarks/demo_throughput.py            # a table
    python benchmarks/demo_throughput.py --json     # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import relight
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import problems
from relight_torch.demo.run import Recipe, warm_start
from relight_torch.models.tiny import tiny_engine


async def measure(recipe: Recipe, store_path: Path) -> dict[str, Any]:
    """Run the demo's RL loop for ``recipe.iterations`` iterations and time its parts."""
    with tiny_engine(seed=recipe.seed) as engine:
        warm_start(engine, recipe, Console(file=io.StringIO()))
        algorithm = recipe.grpo(engine)
        store = relight.open_store(f"sqlite:///{store_path}")
        trainer = recipe.trainer(algorithm, store=store, console=Console(quiet=True))
        count = recipe.iterations * recipe.tasks_per_iteration
        tasks = [{**p.as_task(), "temperature": 1.0} for p in problems(count, seed=recipe.seed + 1)]
        began = time.perf_counter()
        try:
            history = await trainer.afit(calculator_agent, tasks)
        finally:
            await store.close()
        wall = time.perf_counter() - began
        batches, rows = engine.batches, engine.rows
    timed = history[1:] or history
    calls = sum(row["transitions"] for row in timed)
    return {
        "benchmark": "demo_throughput",
        "iterations": recipe.iterations,
        "rollouts_per_iteration": recipe.tasks_per_iteration * recipe.samples_per_task,
        "calls_per_iteration": statistics.fmean(row["transitions"] for row in history),
        "calls_per_s": calls / sum(row["time_rollouts_s"] for row in timed),
        "rollout_s": statistics.fmean(row["time_rollouts_s"] for row in timed),
        "update_s": statistics.fmean(row["time_update_s"] for row in timed),
        "iteration_s": wall / recipe.iterations,
        "batch_mean": rows / batches,
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=6, help="GRPO iterations (default 6)")
    parser.add_argument("--sft-steps", type=int, default=150, help="warm-start steps first (default 150)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    console = Console(stderr=args.json)
    recipe = Recipe(iterations=args.iterations, sft_steps=args.sft_steps)
    with tempfile.TemporaryDirectory() as scratch, console.status("warm start, then GRPO through relight…"):
        result = asyncio.run(measure(recipe, Path(scratch) / "store.db"))
    if args.json:
        print(json.dumps(result))
        return
    table = Table(title="demo throughput (tiny Llama, CPU, whole relight stack)", title_justify="left")
    for column in ("rollouts/iteration", "calls/iteration", "calls/s", "rollouts s", "update s", "iteration s"):
        table.add_column(column, justify="right")
    table.add_column("sequences/batch", justify="right")
    table.add_row(
        str(result["rollouts_per_iteration"]),
        f"{result['calls_per_iteration']:.0f}",
        f"{result['calls_per_s']:.1f}",
        f"{result['rollout_s']:.2f}",
        f"{result['update_s']:.2f}",
        f"{result['iteration_s']:.2f}",
        f"{result['batch_mean']:.1f}",
    )
    console.print(table)


if __name__ == "__main__":
    main()
