"""Train the crew's analyst on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO; the reporter is not trained.

python examples/crew/crew_train.py --out runs/crew [--seed 0] [--iterations 16]
"""

from __future__ import annotations

from crew_scripted import scripted_model
from math_crew import TRAINED_ROLE, load, solve

from relight_torch.recipe import Recipe, main

RECIPE = Recipe()
"""The shared defaults: 32 scripted runs, 30 SFT steps at 5e-5, 16 GRPO updates of 4 tasks x 4 samples at 1e-5."""

if __name__ == "__main__":
    main(solve, train=load("train"), val=load("test"), script=scripted_model, recipe=RECIPE, roles=[TRAINED_ROLE])
