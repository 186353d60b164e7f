"""Learning signal: which groups of transitions a group-relative algorithm can learn from.

GRPO (and REINFORCE++, which subtracts the group mean first) gives every transition of a group
whose rewards are all equal an advantage of exactly zero: such a group costs a forward and a
backward pass and teaches nothing, so algorithms skip it. The trainer's record of what an update
trained (:mod:`relight.transitions.trained_calls`) and its warning about a step without signal
(:mod:`relight.training.learning_signal`) both use this one definition.

With several policies a group is a policy's calls of one group id: each policy normalises its own
advantages, so one task's group can be flat for the checker (every verdict rewarded alike) and not
for the writer. A group is therefore named by its :data:`GroupKey`, ``(policy, group_id)``; without
policies the policy is None and the key is the group id's.
"""

from __future__ import annotations

from collections.abc import Sequence

from relight.records import Transition

__all__ = ["GroupKey", "flat_groups", "group_key"]

GroupKey = tuple[str | None, str]
"""A group of transitions as an algorithm normalises it: ``(policy, group_id)``."""


def group_key(transition: Transition) -> GroupKey:
    """The group ``transition`` is normalised in: its group id within its policy."""
    return transition.policy, transition.group_id


def flat_groups(transitions: Sequence[Transition], *, tolerance: float = 1e-9) -> set[GroupKey]:
    """The groups whose transitions all carry the same reward (to ``tolerance``): no advantage to learn from."""
    spans: dict[GroupKey, tuple[float, float]] = {}
    for transition in transitions:
        key = group_key(transition)
        low, high = spans.get(key, (transition.reward, transition.reward))
        spans[key] = (min(low, transition.reward), max(high, transition.reward))
    return {group for group, (low, high) in spans.items() if high - low <= tolerance}
