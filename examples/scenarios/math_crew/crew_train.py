"""Train the crew's analyst on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO; the reporter is not trained.

python examples/scenarios/math_crew/crew_train.py --out runs/crew [--seed 0] [--iterations 16] [--policies 2]

The recipe (README.md says why and what it measured), sized for two shared CPU cores: 32 scripted
runs as demonstrations (one calculator expression per problem), 24 SFT steps of 8 of the analyst's
calls at 2e-4; then GRPO at 3e-5 on 4 problems x 8 samples per update, 16 updates; only the top
10 of the 30 layers train (the lower 20 run forward only, which is what makes CrewAI's long prompts
affordable); greedy evaluation on 32 held-out problems before the first update and after the last.

``--policies 2`` trains the analyst and the reporter as two policies, a LoRA adapter each on the top 10
layers (lr 2e-4), after the same warm start; both are rewarded with the crew's answer, and the reporter
samples at temperature 1 in training. ``--policies 1`` trains both as one shared policy, the baseline two
policies are measured against; with either, the warm start demonstrates both agents' calls.
"""

from __future__ import annotations

from crew_scripted import scripted_model
from math_crew import POLICIES, TRAINED_ROLE, load, solve

from relight_torch.recipes.warm_start_grpo import Recipe, main

RECIPE = Recipe(
    sft_steps=24,
    sft_lr=2e-4,
    iterations=16,
    samples_per_task=8,
    lr=3e-5,
    eval_tasks=32,
    trained_layers=10,
)

if __name__ == "__main__":
    main(
        solve,
        train=load("train"),
        val=load("test"),
        script=scripted_model,
        recipe=RECIPE,
        roles=[TRAINED_ROLE],
        policies=POLICIES,
    )
