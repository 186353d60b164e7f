"""Train the RAG researcher on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

python examples/rag_agent/rag_train.py --out runs/rag [--seed 0] [--iterations 16]
"""

from __future__ import annotations

from rag_agent import research
from rag_data import load
from rag_scripted import scripted_model

from relight_torch.recipe import Recipe, main

RECIPE = Recipe(
    demonstrations=32,
    sft_steps=30,
    sft_lr=5e-5,
    iterations=16,
    tasks_per_iteration=4,
    samples_per_task=4,
    lr=1e-5,
    eval_tasks=40,
)

if __name__ == "__main__":
    main(research, train=load("train"), val=load("dev"), script=scripted_model, recipe=RECIPE)
