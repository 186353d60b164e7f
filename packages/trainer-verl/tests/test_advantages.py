"""verl's estimators on relight batches, against values worked out by hand."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from verl.trainer.config import AlgoConfig

from relight.records import Transition
from relight_verl.advantages import compute_advantages
from relight_verl.batch import build_batch


def transition(group: str, prompt: list[int], response: list[int], reward: float) -> Transition:
    return Transition(
        rollout_id=f"ro-{group}-{reward}",
        attempt_id="at-1",
        group_id=group,
        step=0,
        prompt_token_ids=prompt,
        response_token_ids=response,
        response_logprobs=[-0.5] * len(response),
        reward=reward,
    )


# Two groups: g1 has rewards 1 and 0 (responses of 2 and 3 tokens), g2 one reward of 0.5 (1 token).
TRANSITIONS = [
    transition("g1", [5, 6, 7], [8, 9], 1.0),
    transition("g1", [5], [10, 11, 12], 0.0),
    transition("g2", [1, 2], [3], 0.5),
]


def batch_with(estimator: str, **algorithm: object):
    batch, _ = build_batch(TRANSITIONS, pad_token_id=0, max_prompt_length=8, max_response_length=8, multiple_of=4)
    assert batch is not None
    return batch, AlgoConfig(adv_estimator=estimator, **algorithm)  # type: ignore[arg-type]


def per_token(batch_advantages: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    return [
        [value for value, keep in zip(row, keep_row, strict=True) if keep]
        for row, keep_row in zip(batch_advantages.tolist(), mask.tolist(), strict=True)
    ]


def test_grpo_normalises_within_each_group() -> None:
    batch, algorithm = batch_with("grpo")
    compute_advantages(batch, algorithm)
    # g1: mean 0.5, sample std sqrt(0.5); g2 alone: verl leaves a lone score as it is (mean 0, std 1).
    high = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [[high, high], [-high] * 3, [0.5], []]
    got = per_token(batch.batch["advantages"], batch.batch["response_mask"])
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want, abs=1e-6)
    assert batch.batch["advantages"][3].abs().sum() == 0  # the padding row


def test_dr_grpo_only_centres() -> None:
    batch, algorithm = batch_with("grpo", norm_adv_by_std_in_grpo=False)
    compute_advantages(batch, algorithm)
    assert per_token(batch.batch["advantages"], batch.batch["response_mask"])[:3] == [
        [0.5, 0.5],
        [-0.5, -0.5, -0.5],
        [0.5],
    ]


def test_rloo_subtracts_the_mean_of_the_others() -> None:
    batch, algorithm = batch_with("rloo")
    compute_advantages(batch, algorithm)
    # g1: 1 - 0 = 1 and 0 - 1 = -1; a lone sample keeps its score.
    assert per_token(batch.batch["advantages"], batch.batch["response_mask"])[:3] == [[1, 1], [-1, -1, -1], [0.5]]


# Reward-to-go on every sampled token (gamma 1), whitened over all six of them.
REWARD_TO_GO = [[1.0, 1.0], [0.0, 0.0, 0.0], [0.5]]


def whitened(rows: list[list[float]]) -> list[list[float]]:
    values = [value for row in rows for value in row]
    mean, std = statistics.fmean(values), statistics.stdev(values)
    return [[(value - mean) / std for value in row] for row in rows]


def test_reinforce_plus_plus_whitens_reward_to_go_over_the_batch() -> None:
    batch, algorithm = batch_with("reinforce_plus_plus", gamma=1.0)
    compute_advantages(batch, algorithm)
    mask = batch.batch["response_mask"]
    assert per_token(batch.batch["returns"], mask)[:3] == REWARD_TO_GO
    for row, want in zip(per_token(batch.batch["advantages"], mask), whitened(REWARD_TO_GO), strict=False):
        assert row == pytest.approx(want, abs=1e-5)


def test_gae_uses_the_critics_values() -> None:
    batch, algorithm = batch_with("gae", gamma=1.0, lam=1.0)
    values = torch.zeros_like(batch.batch["token_level_scores"])
    values[0, :2] = torch.tensor([0.5, 0.25])
    batch.batch["values"] = values
    compute_advantages(batch, algorithm)
    mask = batch.batch["response_mask"]
    # With lambda = 1 the returns are the rewards to go whatever the values; the advantages are
    # returns minus values (first row: 1 - 0.5, 1 - 0.25), whitened.
    assert per_token(batch.batch["returns"], mask)[:3] == REWARD_TO_GO
    raw = [[0.5, 0.75], [0.0, 0.0, 0.0], [0.5]]
    for row, want in zip(per_token(batch.batch["advantages"], mask), whitened(raw), strict=False):
        assert row == pytest.approx(want, abs=1e-5)


def test_gae_without_values_says_what_is_missing() -> None:
    batch, algorithm = batch_with("gae")
    with pytest.raises(ValueError, match="values"):
        compute_advantages(batch, algorithm)


def test_a_group_with_equal_rewards_is_trained_with_zero_advantage_not_skipped() -> None:
    """verl keeps a flat group in the batch (its rows count in the loss's token mean), so relight's record
    of what an update trained counts its calls as trained: VerlAlgorithm does not skip flat groups."""
    from relight.transitions.trained_calls import skipped_groups
    from relight_verl import VerlAlgorithm

    flat = [transition("flat", [5, 6], [8, 9], 1.0), transition("flat", [5], [10], 1.0)]
    transitions = [*flat, *TRANSITIONS[:2]]
    batch, stats = build_batch(transitions, pad_token_id=0, max_prompt_length=8, max_response_length=8, multiple_of=4)
    assert batch is not None
    assert stats.trained == 4
    compute_advantages(batch, AlgoConfig(adv_estimator="grpo"))
    rows = per_token(batch.batch["advantages"], batch.batch["response_mask"])
    assert rows[:2] == [[0.0, 0.0], [0.0]]
    assert all(value != 0 for row in rows[2:] for value in row)
    assert skipped_groups(VerlAlgorithm(model="m"), transitions) == set()
