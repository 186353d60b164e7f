"""Train the calc agent's solver on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/scenarios/calc_agent/calc_train.py --out runs/calc [--seed 0] [--iterations 8]

The recipe (README.md says why and what it measured), sized for two shared CPU cores: 96 scripted
runs of one to three steps as demonstrations (272 calls), 24 SFT steps of 8 calls at 3e-4 (the
formats and part of the problems: held-out reward ~0.1-0.3, room for RL); then GRPO at 3e-5
on 4 problems x 8 samples per update, 13 updates, the problems drawn balanced over the templates;
only the top 10 of the 30 layers train; greedy evaluation on 32 held-out problems before the
first update and after the last.
"""

from __future__ import annotations

from calc_agent import solve
from calc_data import load
from calc_scripted import scripted_model

from relight_torch.recipes.warm_start_grpo import Recipe, main

RECIPE = Recipe(
    demonstrations=96,
    sft_steps=24,
    sft_batch_size=8,
    sft_lr=3e-4,
    iterations=13,
    tasks_per_iteration=4,
    samples_per_task=8,
    lr=3e-5,
    eval_tasks=32,
    trained_layers=10,
    balance_by="kind",
)


if __name__ == "__main__":
    main(solve, train=load("train"), val=load("test"), script=scripted_model, recipe=RECIPE)
