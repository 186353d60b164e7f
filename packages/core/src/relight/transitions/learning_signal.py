"""Learning signal: which groups of transitions a group-relative algorithm can learn from.

GRPO (and REINFORCE++, which subtracts the group mean first) gives every transition of a group
whose rewards are all equal an advantage of exactly zero: such a group costs a forward and a
backward pass and teaches nothing, so algorithms skip it. The trainer's record of what an update
trained (:mod:`relight.transitions.trained_calls`) and its warning about a step without signal
(:mod:`relight.training.dynamic_sampling`) both use this one definition.

With several policies a group is a policy's calls of one group id: each policy normalises its own
advantages, so one task's group can be flat for the checker (every verdict rewarded alike) and not
for the writer. A group is therefore named by its :data:`GroupKey`, ``(policy, group_id)``; without
policies the policy is None and the key is the group id's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from relight.records import Transition

__all__ = ["TOLERANCE", "GroupKey", "flat_groups", "group_key", "has_signal"]

TOLERANCE = 1e-9
"""Rewards closer than this are equal: a group of them has no signal."""

GroupKey = tuple[str | None, str]
"""A group of transitions as an algorithm normalises it: ``(policy, group_id)``."""


def group_key(transition: Transition) -> GroupKey:
    """The group ``transition`` is normalised in: its group id within its policy."""
    return transition.policy, transition.group_id


def has_signal(rewards: Iterable[float], *, tolerance: float = TOLERANCE) -> bool:
    """Whether a group with these rewards has learning signal: they are not all equal (to ``tolerance``)."""
    values = list(rewards)
    return bool(values) and max(values) - min(values) > tolerance


def flat_groups(transitions: Sequence[Transition], *, tolerance: float = TOLERANCE) -> set[GroupKey]:
    """The groups whose transitions all carry the same reward (to ``tolerance``): no advantage to learn from."""
    rewards: dict[GroupKey, list[float]] = {}
    for transition in transitions:
        rewards.setdefault(group_key(transition), []).append(transition.reward)
    return {group for group, values in rewards.items() if not has_signal(values, tolerance=tolerance)}
