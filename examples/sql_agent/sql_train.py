"""Train the SQL agent's writer and rewriter on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/sql_agent/sql_train.py --out runs/sql [--seed 0] [--iterations 16]

Only ``write_query`` and ``rewrite_query`` calls are demonstrated and trained; ``check_query``
runs on the same model, untrained (the paper's ``agent_match="write|rewrite"``).
"""

from __future__ import annotations

from sql_agent import TRAINED_ROLES, answer
from sql_data import load
from sql_scripted import script

from relight_torch.recipe import Recipe, main

RECIPE = Recipe(demonstrations=64)

if __name__ == "__main__":
    main(
        answer,
        train=load("train"),
        val=load("dev"),
        script=script(mistakes=False),
        recipe=RECIPE,
        roles=TRAINED_ROLES,
    )
