"""The judge example: its dev-mode command, an offline fit rewarded by a scripted judge, and SmolLM2 judging SmolLM2."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from rich.console import Console
from support_agent import RUBRIC, TASKS, scripted_judge, scripted_model, support

from relight import Trainer, semconv
from relight.records import SpanKind
from relight.rewards import Judge
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import last_attempt_spans
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.examples import example_file, run_example


def test_the_readme_command_runs_offline(tmp_path: Path) -> None:
    rows = run_example(example_file("frameworks/judge_agent/support_agent.py", near=__file__), cwd=tmp_path)
    assert any("succeeded" in row for row in rows), rows


async def test_the_judge_alone_rewards_a_fit() -> None:
    """No code reward: every reward the algorithm sees is the scripted judge's (1.0 for quoting the handbook)."""
    store = InMemoryStore()
    with tempfile.TemporaryDirectory() as run_dir:
        async with (
            ScriptedUpstream(scripted_model) as policy,
            ScriptedUpstream(scripted_judge, model="j") as judge_server,
        ):
            algorithm = RecordingAlgorithm(policy)
            judge = Judge(RUBRIC, base_url=judge_server.base_url, model="j")
            trainer = Trainer(
                algorithm,
                store=store,
                batch_size=2,
                n_samples=2,
                group_rewards=[judge],
                run_dir=run_dir,
                console=Console(file=io.StringIO()),
            )
            (step,) = await trainer.afit(support, [TASKS[0], TASKS[1]])
    (batch,) = algorithm.batches
    rewards = {t.group_id: t.reward for t in batch}
    assert rewards == {"step1-task0": 0.5, "step1-task1": 0.5}, "each group's replies are alike: ranked equal"
    assert (step["judge_groups"], step["judge_calls"], step["groups_no_signal"]) == (2, 2, 2)


@pytest.mark.slow
async def test_two_grpo_steps_with_smollm2_as_policy_and_judge(smollm2_path: Path) -> None:
    """The wiring with a real model on both sides: a weak judge, so any verdict (or none) is accepted, but counted."""
    from relight_testing.models import served_process
    from relight_torch import GRPO, TorchEngine

    store = InMemoryStore()
    algorithm = GRPO(TorchEngine.from_pretrained(smollm2_path), lr=1e-5)
    with served_process(smollm2_path, name="smollm2-judge") as judge_server, tempfile.TemporaryDirectory() as run_dir:
        judge = Judge(RUBRIC, base_url=judge_server.base_url, model="smollm2-judge", max_tokens=96, timeout=300.0)
        trainer = Trainer(
            algorithm,
            store=store,
            batch_size=1,
            n_samples=2,
            group_rewards=[judge],
            run_dir=run_dir,
            console=Console(file=io.StringIO()),
        )
        history = await trainer.afit(support, TASKS[:2])
    assert [int(step["step"]) for step in history] == [1, 2]
    updated = sum(not step.get("update_skipped") for step in history)
    assert algorithm.policy_version == updated, (
        "a weak judge may leave a step without signal: only updates that ran count"
    )
    for step in history:
        assert step["judge_groups"] == 1
        assert 1 <= step["judge_calls"] <= judge.max_tries
        assert step["judge_input_tokens"] > 0
        assert step["transitions"] == 2, "the policy's two calls; the judge's are not the policy's"
    for rollout in await store.list_rollouts():
        spans = await last_attempt_spans(store, rollout.rollout_id)
        (note,) = [json.loads(str(s.attributes[semconv.ANNOTATION])) for s in spans if s.name == "annotation judge"]
        judged = [s for s in spans if s.kind is SpanKind.REWARD and s.attributes.get(semconv.REWARD_NAME) == "judge"]
        assert ("rank" in note and len(judged) == 1) or (note.get("no_signal") == "malformed" and not judged)
