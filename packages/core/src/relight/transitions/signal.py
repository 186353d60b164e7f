"""Learning signal: which groups of transitions a group-relative algorithm can learn from.

GRPO (and REINFORCE++, which subtracts the group mean first) gives every transition of a group
whose rewards are all equal an advantage of exactly zero: such a group costs a forward and a
backward pass and teaches nothing, so algorithms skip it. The trainer's record of what an update
trained (:mod:`relight.transitions.trained_calls`) and its warning about a step without signal
(:mod:`relight.training.learning_signal`) both use this one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

from relight.records import Transition

__all__ = ["flat_groups"]


def flat_groups(transitions: Sequence[Transition], *, tolerance: float = 1e-9) -> set[str]:
    """The group ids whose transitions all carry the same reward (to ``tolerance``): no advantage to learn from."""
    spans: dict[str, tuple[float, float]] = {}
    for transition in transitions:
        low, high = spans.get(transition.group_id, (transition.reward, transition.reward))
        spans[transition.group_id] = (min(low, transition.reward), max(high, transition.reward))
    return {group for group, (low, high) in spans.items() if high - low <= tolerance}
