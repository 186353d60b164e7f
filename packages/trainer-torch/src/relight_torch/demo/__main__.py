"""``python -m relight_torch.demo [--out DIR] [--seed N]``: run the demo and print where its results are."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from relight_torch.demo.run import Recipe, run_demo


def main(argv: list[str] | None = None) -> None:
    defaults = Recipe()
    parser = argparse.ArgumentParser(prog="python -m relight_torch.demo", description=__doc__)
    parser.add_argument("--out", type=Path, help="run folder (default: runs/demo-<time>)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--iterations", type=int, default=defaults.iterations, help="GRPO iterations")
    parser.add_argument("--sft-steps", type=int, default=defaults.sft_steps, help="warm-start steps")
    args = parser.parse_args(argv)
    out = args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    run_demo(Recipe(seed=args.seed, iterations=args.iterations, sft_steps=args.sft_steps), out)


if __name__ == "__main__":
    main()
