"""Train the calc agent's solver on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/calc_agent/calc_train.py --out runs/calc [--seed 0] [--iterations 8]

The recipe (README.md says why), sized for two shared CPU cores: 24 scripted runs of one to three
steps as demonstrations, 16 SFT steps of 6 calls at 2e-4 (the formats, not mastery); then GRPO at
1e-4 on 2 problems x 4 samples per update, a flat problem sampled once more, 10 updates; only the
top 10 of the 30 layers train (the update's cost is the forward and backward passes over every
prompt); greedy evaluation on 32 held-out problems before the first update and after the last.
"""

from __future__ import annotations

from calc_agent import solve
from calc_data import load
from calc_scripted import scripted_model

from relight_torch.recipe import Recipe, main

RECIPE = Recipe(
    demonstrations=96,
    sft_steps=16,
    sft_batch_size=6,
    sft_lr=2e-4,
    iterations=8,
    tasks_per_iteration=2,
    samples_per_task=4,
    lr=1e-4,
    eval_tasks=32,
    dynamic_sampling=1,
    trained_layers=10,
)


if __name__ == "__main__":
    main(solve, train=load("train"), val=load("test"), script=scripted_model, recipe=RECIPE)
