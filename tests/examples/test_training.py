"""Two GRPO steps of each scenario example on the real SmolLM2-135M-Instruct, through its training recipe.

The reward need not move in two steps; what must hold: the warm start's demonstrations are the
trained roles' calls, each update gets transitions of the trained roles only, sampled by the
policy the previous update produced, the version rises by exactly the updates that had signal (GRPO
makes none from a group whose rewards are all equal), the weights change, and the run folder is complete.

So that the quick steps carry signal, one step trains on the task the warm start demonstrated (a
short, strong SFT on its calls makes the model solve it some of the time at temperature 1: calc),
the other on a like task it did not see (a memorized answer can be right every time: sql), and
dynamic sampling draws a flat group's task again. A step without signal is allowed (a group can
still come back all right or all wrong), a run without any is not: it would prove nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from relight.records import Transition
from relight_testing.examples import assert_verified

torch = pytest.importorskip("torch")
recipe_module = pytest.importorskip("relight_torch.recipes.warm_start_grpo")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
    pytest.mark.timeout(1800),  # an update of ~10 SmolLM2 transitions takes minutes on two busy cores
]

STEPS = replace(
    recipe_module.Recipe().quick(),
    demonstrations=1,
    sft_steps=6,
    sft_batch_size=3,
    sft_lr=5e-4,
    tasks_per_iteration=1,
    samples_per_task=3,
    eval_tasks=1,
    dynamic_sampling=2,
)
"""One demonstrated task, learnt hard; one task per step, sampled three at a time (up to three times while flat)."""

TOP_LAYERS = replace(STEPS, sft_steps=4, sft_lr=4e-4, trained_layers=10)
"""calc, sql and crew: only the top 10 of SmolLM2's 30 layers train, as in the calc recipe, so each SFT step
and update costs about 1.7 forward passes instead of 4. Six SFT steps at 5e-4 on those layers made calc's
demonstrated task right in all 18 samples (no signal), hence 4 at 4e-4; rag's task then earned nothing
in 19 samples, so rag keeps STEPS (all weights). STEPS broke crew's untrained reporter, which shares the
weights: greedily it wrote ``<number>`` or ``<tool>%`` lines instead of the analyst's result."""

CREW = replace(TOP_LAYERS, sft_steps=6, sft_lr=5e-4, samples_per_task=8)
"""crew: both steps train the demonstrated one-step problem, in groups of 8. After TOP_LAYERS' warm start its
analyst solved it in 2 of 9 samples and a two-step one in none of 9; after 6 steps at 5e-4, in 19 of 23, while
other one-step problems earned nothing in 29 (0 of 10 with the same template and other numbers: the analyst
multiplied the 12 of the calculator's example ``12 * (3 + 4)``). At 0.83 a group of 8 is all right with p 0.23,
so a step stays flat after its two resamplings with p 0.01, and both steps with p 1e-4."""

RAG = replace(STEPS, samples_per_task=6)
"""rag: both steps train the demonstrated two-hop question, in groups of 6. How often the warm-started policy makes
both searches and answers it right depends on the seed: 9 of 11 samples with seed 1, 3 of 20 with seed 2. With
groups of 3, and one of the steps on a question it had not seen (it answered with the demonstrated city), seed 0
drew no right answer in 18 samples and the run had no signal while seeds 1 and 2 passed; a change in the runner's
timing alone reorders the engine's draws, so CI failed or passed with it. At 3 in 20 a group of 6 comes back flat
with p 0.38, and the six groups of two steps with p 0.003. Seeds 0 and 2 passed this way (6 of 14 and 5 of 26)."""


def scenario(name: str) -> dict[str, Any]:
    """The agent, data, script and trained roles each example's training command uses."""
    if name == "calc":
        import calc_agent
        import calc_data
        from calc_scripted import scripted_model

        one_step = [task for task in calc_data.load("train") if task["level"] == 1]  # two calls: a shorter update
        return {"agent": calc_agent.solve, "train": one_step, "val": calc_data.load("test"),
                "script": scripted_model, "roles": None, "expect": {"solver"}}  # fmt: skip
    if name == "sql":
        import sql_agent
        import sql_data
        from sql_scripted import script

        ages = sql_data.load("train")[1:3]  # names of students older than 18, then 19: one number apart
        return {"agent": sql_agent.answer, "train": ages, "val": sql_data.load("dev"),
                "script": script(mistakes=False), "roles": sql_agent.TRAINED_ROLES,
                "expect": {"write_query", "rewrite_query"}}  # fmt: skip
    if name == "rag":
        import rag_agent
        import rag_data
        from rag_scripted import scripted_model

        pelval = rag_data.load("train")[:1]  # who made The Pelval Garden, then where were they born: two searches
        return {"agent": rag_agent.research, "train": pelval, "val": rag_data.load("dev"),
                "script": scripted_model, "roles": None, "expect": {"researcher"}}  # fmt: skip
    import math_crew
    from crew_scripted import scripted_model

    plants = math_crew.load("train")[1:2]  # Chloe buys 18 plants at 15 dollars each: one calculator step
    return {"agent": math_crew.solve, "train": plants, "val": math_crew.load("test"),
            "script": scripted_model, "roles": [math_crew.TRAINED_ROLE], "expect": {"Analyst"}}  # fmt: skip


@pytest.mark.parametrize("name", ["calc", "sql", "rag", "crew"])
def test_two_steps_train_the_right_roles_on_the_policy_each_step_left(
    name: str, smollm2_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name == "crew":
        monkeypatch.setenv("HOME", str(tmp_path))  # CrewAI writes there at import
        for variable in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
        monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
        monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")
    example = scenario(name)
    updates: list[tuple[Sequence[Transition], Mapping[str, float]]] = []

    def remember(transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        updates.append((transitions, metrics))

    recipe = {"rag": RAG, "crew": CREW}.get(name, TOP_LAYERS)
    engine = recipe_module.load_engine(smollm2_path)
    before = [parameter.detach().clone() for parameter in engine.model.parameters()]
    try:
        summary = recipe_module.train_agent(
            example["agent"], engine, train=example["train"][:2], demo_tasks=example["train"][:1], val=example["val"],
            script=example["script"], recipe=recipe, out=tmp_path / "run", roles=example["roles"], callbacks=[remember],
        )  # fmt: skip
    finally:
        engine.close()
    assert summary["demonstrated_calls"] > 0
    assert summary["iterations"] == 2
    assert len(updates) == 2
    version = 1  # the warm start's
    for transitions, metrics in updates:
        assert transitions
        assert {t.role for t in transitions} <= example["expect"], {t.role for t in transitions}
        assert {t.policy_version for t in transitions} == {version}, "each step samples the previous step's policy"
        assert all(t.response_logprobs and len(t.response_logprobs) == len(t.response_token_ids) for t in transitions)
        signal = len({t.reward for t in transitions}) > 1
        assert metrics.get("update_skipped", 0.0) == (0.0 if signal else 1.0), [t.reward for t in transitions]
        version += signal
    assert version > 1, f"no step had signal: rewards {[[t.reward for t in ts] for ts, _ in updates]}"
    assert summary["policy_version"] == version, "the warm start, then one version per update with signal"
    assert any(not torch.equal(a, b) for a, b in zip(before, engine.model.parameters(), strict=True))
    run = tmp_path / "run"
    for name_ in ("summary.json", "scenario.json", "metrics.jsonl", "reward_curve.png", "checkpoints", "store.db"):
        assert (run / name_).exists(), name_
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["kind"] for row in rows] == ["val", "train", "train", "val"]
    assert 0.0 <= json.loads((run / "scenario.json").read_text())["initial_eval_reward"] <= 1.0
    assert_verified(run)  # relight verify finds the run's store clean
