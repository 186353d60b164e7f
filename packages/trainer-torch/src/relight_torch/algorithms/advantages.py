"""Advantage estimators over transitions: one scalar per transition, spread over its response tokens.

They follow verl's outcome-reward estimators to the letter (``compute_grpo_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage`` in ``verl.trainer.ppo.core_algos``):
unbiased standard deviations, the same epsilons, and a group of one scored against a mean of 0 and
a deviation of 1. So a policy trained with ``relight-torch`` or ``relight-verl`` sees the same
numbers. :func:`grpo_advantages` also scales as TRL's ``GRPOTrainer`` does (``scale_rewards``
``"group"``, ``"batch"`` or ``"none"``); TRL adds 1e-4 to the deviation where verl adds 1e-6.
Each transition counts once in its group: under LightningRL every call of an episode
carries the episode's credit, so an episode of three calls weighs three times. Given the episodes,
:func:`grpo_advantages` and :func:`episode_weights` count each episode once instead.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

import torch

__all__ = ["ScaleRewards", "episode_weights", "grpo_advantages", "reinforce_pp_advantages"]

ScaleRewards = Literal["group", "batch", "none"]
"""What GRPO divides a reward less its group's mean by (TRL's ``scale_rewards``): the group's standard
deviation, the whole batch's, or nothing (Dr. GRPO)."""
SCALE_REWARDS: tuple[ScaleRewards, ...] = ("group", "batch", "none")


def _group_indices(group_ids: Sequence[Hashable]) -> list[list[int]]:
    groups: defaultdict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        groups[group].append(index)
    return list(groups.values())


def grpo_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    episode_ids: Sequence[Hashable] | None = None,
    scale_rewards: ScaleRewards = "group",
    std_epsilon: float = 1e-6,
    scale_by_std: bool | None = None,
) -> torch.Tensor:
    """GRPO: each reward less its group's mean, over a standard deviation (``scale_rewards``).

    Args:
        rewards: One per transition (the credit the core assigned it).
        group_ids: The transition's group (its task, for GRPO).
        episode_ids: The transition's episode (its rollout). Given, means and deviations are taken over
            episodes' mean rewards, so a wrong episode of three calls moves the baseline as much as a
            right one of one call; None takes them over the transitions.
        scale_rewards: ``"group"`` divides by the group's standard deviation, ``"batch"`` by the whole
            batch's (TRL's choice for it: the group's mean is still subtracted), ``"none"`` by nothing (Dr. GRPO).
        std_epsilon: Added to the deviation, so a group of equal rewards gets advantages of 0: 1e-6 as
            verl (relight-verl trains with the same numbers); TRL adds 1e-4.
        scale_by_std: Deprecated: ``scale_rewards="group"`` (True) or ``"none"`` (False).
    """
    if scale_by_std is not None:
        warnings.warn(
            "grpo_advantages(scale_by_std=...) is deprecated: use scale_rewards='group' (True) or 'none' (False)",
            DeprecationWarning,
            stacklevel=2,
        )
        scale_rewards = "group" if scale_by_std else "none"
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}; got {scale_rewards!r}")
    if len(rewards) != len(group_ids):
        raise ValueError(f"rewards ({len(rewards)}) and group_ids ({len(group_ids)}) must have the same length")
    if episode_ids is not None and len(episode_ids) != len(rewards):
        raise ValueError(f"rewards ({len(rewards)}) and episode_ids ({len(episode_ids)}) must have the same length")
    scores = torch.tensor(rewards, dtype=torch.float32)
    advantages = torch.empty_like(scores)
    for members in _group_indices(group_ids):
        group = _episode_means(scores, members, episode_ids)
        mean, std = (group.mean(), group.std()) if len(group) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        centred = scores[members] - mean
        advantages[members] = centred / (std + std_epsilon) if scale_rewards == "group" else centred
    if scale_rewards == "batch":
        everything = _episode_means(scores, list(range(len(scores))), episode_ids)
        std = everything.std() if len(everything) > 1 else torch.tensor(0.0)
        advantages /= std + std_epsilon
    return advantages


def _episode_means(scores: torch.Tensor, members: list[int], episode_ids: Sequence[Hashable] | None) -> torch.Tensor:
    """The rewards of ``members``, or with ``episode_ids`` each of their episodes' mean reward."""
    if episode_ids is None:
        return scores[members]
    episodes = _group_indices([episode_ids[i] for i in members])
    return torch.stack([scores[[members[i] for i in episode]].mean() for episode in episodes])


def episode_weights(episode_ids: Sequence[Hashable], response_lengths: Sequence[int]) -> list[float]:
    """Per-transition loss weights under which every episode weighs as much as the batch's average episode.

    The token-mean loss weighs every response token alike, so an episode weighs its number of
    tokens: three long wrong episodes outweigh one short right one of the same group, and the
    update pushes down what they share (the format, the tool call) harder than the right answer
    pushes it up. Each transition's weight is the average episode's tokens over its own episode's,
    so the weights' token-weighted sum is still the batch's token count and the step's scale stays.
    """
    if len(episode_ids) != len(response_lengths):
        raise ValueError(
            f"episode_ids ({len(episode_ids)}) and response_lengths ({len(response_lengths)}) must have the same length"
        )
    tokens: defaultdict[Hashable, int] = defaultdict(int)
    for episode, length in zip(episode_ids, response_lengths, strict=True):
        tokens[episode] += length
    average = sum(tokens.values()) / len(tokens) if tokens else 0.0
    return [average / tokens[episode] if tokens[episode] else 0.0 for episode in episode_ids]


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
