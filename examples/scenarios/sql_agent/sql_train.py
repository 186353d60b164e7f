"""Train the SQL agent's writer and rewriter on the CPU: SmolLM2-135M-Instruct, a warm start, then GRPO.

    python examples/scenarios/sql_agent/sql_train.py --out runs/sql [--seed 0] [--iterations 4] [--policies 2]

Only ``write_query`` and ``rewrite_query`` calls are demonstrated and trained; ``check_query``
runs on the same model, untrained (the paper's ``agent_match="write|rewrite"``). The recipe
(README.md says why and what it measured): 96 scripted runs as demonstrations, in which the
checker doubts every other right query so the rewriter is shown keeping it (96 write and ~48
rewrite calls); 20 SFT steps of 8 calls at 3e-4; GRPO at 3e-5 on 4 questions x 8 samples per
update, 8 updates; one rewrite per question (``max_turns=1``: SmolLM2 as the checker almost never
passes a query, so each extra turn is two more calls that mostly copy); the top 10 of the 30 layers
train; greedy evaluation on all 61 dev questions.

``--policies 2`` trains the writer/rewriter and the checker as two policies, a LoRA adapter each on
the top 10 layers (lr 2e-4), after a warm start that demonstrates the checker too; the checker learns
from its own reward (the share of its verdicts that match the execution match, a reward of the
``check_query`` role that reaches the checker's calls alone), and its held-out accuracy before and
after RL goes in scenario.json. ``--policies 1`` trains the same three roles as one shared policy, the baseline two
policies are measured against. With either, the warm start demonstrates the checker's calls too.
"""

from __future__ import annotations

from sql_agent import CHECKER_REWARD, POLICIES, TRAINED_ROLES, answer
from sql_data import load
from sql_scripted import script

from relight_torch.recipes.warm_start_grpo import Recipe, main

ONE_REWRITE = {"max_turns": 1}
DEV = [{**task, **ONE_REWRITE} for task in load("dev")]

RECIPE = Recipe(
    demonstrations=96,
    sft_steps=20,
    sft_batch_size=8,
    sft_lr=3e-4,
    iterations=8,
    tasks_per_iteration=4,
    samples_per_task=8,
    lr=3e-5,
    eval_tasks=len(DEV),
    trained_layers=10,
)

if __name__ == "__main__":
    main(
        answer,
        train=[{**task, **ONE_REWRITE} for task in load("train")],
        val=DEV,
        script=script(mistakes=False, doubts=True),
        recipe=RECIPE,
        roles=TRAINED_ROLES,
        policies=POLICIES,
        held_out_figures=[CHECKER_REWARD],
    )
