"""Train the calc agent's solver on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/calc_agent/calc_train.py --out runs/calc [--seed 0] [--iterations 24]

The recipe (README.md says why): 48 scripted runs on one-step problems only as demonstrations,
so the warm start teaches the tool-call and answer formats but not how to chain steps; 30 SFT
steps; then GRPO on problems of one to three steps, 4 problems × 8 samples per update.
"""

from __future__ import annotations

from calc_agent import solve
from calc_data import load
from calc_scripted import scripted_model

from relight_torch.recipe import Recipe, main

RECIPE = Recipe(demonstrations=48, iterations=24, samples_per_task=8, eval_tasks=48)


if __name__ == "__main__":
    train = load("train")
    one_step = [task for task in train if task["level"] == 1]  # RL has to learn to chain calls itself
    main(solve, train=train, val=load("test"), script=scripted_model, recipe=RECIPE, demo_tasks=one_step)
