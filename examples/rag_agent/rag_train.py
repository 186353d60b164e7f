"""Train the RAG researcher on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

python examples/rag_agent/rag_train.py --out runs/rag [--seed 0] [--iterations 16]
"""

from __future__ import annotations

from rag_agent import research
from rag_data import load
from rag_scripted import scripted_model

from relight_torch.recipe import Recipe, main

RECIPE = Recipe()
"""The shared defaults: 32 scripted runs, 30 SFT steps at 5e-5, 16 GRPO updates of 4 tasks x 4 samples at 1e-5."""

if __name__ == "__main__":
    main(research, train=load("train"), val=load("dev"), script=scripted_model, recipe=RECIPE)
