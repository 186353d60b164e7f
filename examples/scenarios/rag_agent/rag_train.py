"""Train the RAG researcher on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/scenarios/rag_agent/rag_train.py --out runs/rag [--seed 0] [--iterations 5]

The recipe (README.md says why and what it measured): 64 scripted runs as demonstrations (192
calls: a search for the name the question gives, a search for the name the first article gives,
the answer), 24 SFT steps of 8 calls at 3e-4; GRPO at 1e-4 on 4 questions x 4 samples per update;
the top 10 of the 30 layers train; greedy evaluation on 16 dev questions (every third: all five
kinds of question).
"""

from __future__ import annotations

from rag_agent import research
from rag_data import load
from rag_scripted import scripted_model

from relight_torch.recipes.warm_start_grpo import Recipe, main

RECIPE = Recipe(
    demonstrations=64,
    sft_steps=24,
    sft_batch_size=8,
    sft_lr=3e-4,
    iterations=5,
    tasks_per_iteration=4,
    samples_per_task=4,
    lr=1e-4,
    eval_tasks=16,
    trained_layers=10,
)

if __name__ == "__main__":
    main(research, train=load("train"), val=load("dev")[::3], script=scripted_model, recipe=RECIPE)
