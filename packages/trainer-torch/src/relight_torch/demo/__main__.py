"""``python -m relight_torch.demo [--out DIR] [--seed N]``: run the demo and print where its results are."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from relight_torch.demo.run import Recipe, run_demo


def main(argv: list[str] | None = None) -> None:
    defaults = Recipe()
    parser = argparse.ArgumentParser(prog="python -m relight_torch.demo", description=__doc__)
    parser.add_argument("--out", type=Path, help="run folder (default: runs/demo-<date>-<time>)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--sft-steps", type=int, default=defaults.sft_steps, help="warm-start steps")
    parser.add_argument("--iterations", type=int, default=defaults.iterations, help="GRPO iterations")
    parser.add_argument("--tasks", type=int, default=defaults.tasks_per_iteration, help="tasks per iteration")
    parser.add_argument("--samples", type=int, default=defaults.samples_per_task, help="episodes per task")
    parser.add_argument("--eval-tasks", type=int, default=defaults.eval_tasks, help="greedy evaluation tasks")
    args = parser.parse_args(argv)
    recipe = Recipe(
        seed=args.seed,
        sft_steps=args.sft_steps,
        iterations=args.iterations,
        tasks_per_iteration=args.tasks,
        samples_per_task=args.samples,
        eval_tasks=args.eval_tasks,
    )
    run_demo(recipe, args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"))


if __name__ == "__main__":
    main()
