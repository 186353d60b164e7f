"""relight-verl and relight-torch give the same advantages for the same transitions (to 1e-6).

relight-verl lays transitions out as a verl batch and runs verl's own estimators; relight-torch
computes per-transition advantages itself. A policy should not learn differently because of which
trainer it runs on, so the two must agree wherever both offer an estimator.
"""

from __future__ import annotations

import random

import pytest
import torch
from verl.trainer.config import AlgoConfig

from relight.records import Transition
from relight_torch.algorithms.advantages import grpo_advantages, reinforce_pp_advantages
from relight_verl.advantages import compute_advantages
from relight_verl.batch import build_batch


def sampled_transitions(seed: int) -> list[Transition]:
    """Multi-call episodes of several tasks, rewards shared within an episode (LightningRL), odd lengths."""
    rng = random.Random(seed)
    transitions = []
    for task in range(5):
        for episode in range(rng.randint(1, 4)):
            reward = rng.choice([0.0, 1.0, rng.uniform(-1, 2)])
            for step in range(rng.randint(1, 3)):
                response = [rng.randrange(1, 500) for _ in range(rng.randint(1, 9))]
                transitions.append(
                    Transition(
                        rollout_id=f"ro-{task}-{episode}",
                        attempt_id="at-1",
                        group_id=f"task-{task}",
                        step=step,
                        prompt_token_ids=[rng.randrange(1, 500) for _ in range(rng.randint(1, 12))],
                        response_token_ids=response,
                        response_logprobs=[-rng.random() for _ in response],
                        reward=reward,
                    )
                )
    return transitions


def verl_per_transition(transitions: list[Transition], estimator: str, **algorithm: object) -> torch.Tensor:
    """verl's advantages, one per transition: the value on its response tokens (checked to be constant)."""
    batch, stats = build_batch(transitions, pad_token_id=0, max_prompt_length=64, max_response_length=64, multiple_of=8)
    assert batch is not None
    assert stats.trained == len(transitions)
    compute_advantages(batch, AlgoConfig(adv_estimator=estimator, **algorithm))  # type: ignore[arg-type]
    advantages, mask = batch.batch["advantages"][: len(transitions)], batch.batch["response_mask"][: len(transitions)]
    per_row = (advantages * mask).sum(dim=-1) / mask.sum(dim=-1)
    assert torch.allclose(advantages * mask, per_row[:, None] * mask, atol=1e-6)
    return per_row


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale_by_std", [True, False])
def test_grpo(seed: int, scale_by_std: bool) -> None:
    transitions = sampled_transitions(seed)
    ours = grpo_advantages(
        [t.reward for t in transitions],
        [t.group_id for t in transitions],
        scale_rewards="group" if scale_by_std else "none",
    )
    theirs = verl_per_transition(transitions, "grpo", norm_adv_by_std_in_grpo=scale_by_std)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    ("estimator", "baseline"), [("reinforce_plus_plus", False), ("reinforce_plus_plus_baseline", True)]
)
def test_reinforce_plus_plus(seed: int, estimator: str, baseline: bool) -> None:
    transitions = sampled_transitions(seed)
    ours = reinforce_pp_advantages(
        [t.reward for t in transitions],
        [t.group_id for t in transitions],
        [len(t.response_token_ids) for t in transitions],
        baseline=baseline,
    )
    theirs = verl_per_transition(transitions, estimator, gamma=1.0)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=0)
