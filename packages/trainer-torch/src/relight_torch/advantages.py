"""Advantage estimators over transitions: one scalar per transition, spread over its response tokens.

They follow verl's outcome-reward estimators to the letter (``compute_grpo_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage`` in ``verl.trainer.ppo.core_algos``):
unbiased standard deviations, the same epsilons, and a group of one scored against a mean of 0 and
a deviation of 1. So a policy trained with ``relight-torch`` or ``relight-verl`` sees the same
numbers. Each transition counts once in its group: under LightningRL every call of an episode
carries the episode's credit, so an episode of three calls weighs three times.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch

__all__ = ["grpo_advantages", "reinforce_pp_advantages"]


def _group_indices(group_ids: Sequence[Hashable]) -> list[list[int]]:
    groups: defaultdict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        groups[group].append(index)
    return list(groups.values())


def grpo_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    epsilon: float = 1e-6,
    scale_by_std: bool = True,
) -> torch.Tensor:
    """GRPO: each reward less its group's mean, over the group's standard deviation.

    Args:
        rewards: One per transition (the credit the core assigned it).
        group_ids: The transition's group (its task, for GRPO).
        epsilon: Added to the deviation, so a group of equal rewards gets advantages of 0.
        scale_by_std: False gives Dr. GRPO (the mean is subtracted, nothing is divided).
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"rewards ({len(rewards)}) and group_ids ({len(group_ids)}) must have the same length")
    scores = torch.tensor(rewards, dtype=torch.float32)
    advantages = torch.empty_like(scores)
    for members in _group_indices(group_ids):
        group = scores[members]
        mean, std = (group.mean(), group.std()) if len(members) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        advantages[members] = (group - mean) / (std + epsilon) if scale_by_std else group - mean
    return advantages


def reinforce_pp_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    response_lengths: Sequence[int],
    *,
    baseline: bool = True,
) -> torch.Tensor:
    """REINFORCE++ (with its group baseline): rewards less the group mean, then whitened over the batch's tokens.

    Whitening weighs each transition by its number of response tokens, as verl does on token-level
    tensors; ``baseline=False`` skips the group mean (plain REINFORCE++ with outcome rewards, γ = 1).
    """
    if not len(rewards) == len(group_ids) == len(response_lengths):
        raise ValueError(
            f"rewards ({len(rewards)}), group_ids ({len(group_ids)}) and response_lengths "
            f"({len(response_lengths)}) must have the same length"
        )
    scores = torch.tensor(rewards, dtype=torch.float32)
    if baseline:
        for members in _group_indices(group_ids):
            if len(members) > 1:
                scores[members] = scores[members] - scores[members].mean()
    weights = torch.tensor(response_lengths, dtype=torch.float32)
    tokens = weights.sum()
    if tokens < 2:
        raise ValueError(f"REINFORCE++ whitens over response tokens and needs at least 2; got {int(tokens)}")
    mean = (scores * weights).sum() / (tokens + 1e-8)
    variance = ((scores - mean) ** 2 * weights).sum() / (tokens + 1e-8) * tokens / (tokens - 1)
    return (scores - mean) * torch.rsqrt(variance + 1e-8)
