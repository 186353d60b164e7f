"""Which prompt version to improve next: the per-task Pareto front over the validation tasks, as GEPA draws it.

Every prompt version that passed the minibatch gate has a score on each validation task. A version
is on the front when no other does at least as well on every task and better on one; among those,
a version is drawn with a chance in proportion to the tasks on which it scores the best of all. The
version with the best mean is only one of them: a version that alone solves some tasks stays a
parent, so the search keeps the edits that helped somewhere instead of climbing one mean (and,
through it, one minibatch's quirks). Pure functions: the search's state is all they read.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

__all__ = ["best", "front", "pick_parent"]


def front(scores: Mapping[int, Sequence[float]]) -> dict[int, int]:
    """The versions on the front, each with the number of validation tasks on which it scores the best of all.

    ``scores`` maps each version to its score on every validation task, in one task order. A version
    dominated by another (at least as good on every task, better on one) is left out, whatever it leads.
    """
    if not scores:
        return {}
    versions = sorted(scores)
    tasks = len(scores[versions[0]])
    tops = [max(scores[version][task] for version in versions) for task in range(tasks)]
    leads = {version: sum(scores[version][task] == tops[task] for task in range(tasks)) for version in versions}
    return {version: count for version, count in leads.items() if not _dominated(version, scores)}


def pick_parent(scores: Mapping[int, Sequence[float]], rng: random.Random) -> int:
    """A version from the front, drawn with a chance in proportion to the tasks it leads (any, when none leads)."""
    leaders = front(scores)
    if not leaders:
        raise ValueError("there is no prompt version to pick a parent from")
    versions = sorted(leaders)
    weights = [leaders[version] for version in versions]
    if not any(weights):
        return rng.choice(versions)
    return rng.choices(versions, weights=weights)[0]


def best(scores: Mapping[int, Sequence[float]]) -> int:
    """The version with the highest mean score; the oldest of those that tie, so an equal newcomer never replaces it."""
    return min(scores, key=lambda version: (-_mean(scores[version]), version))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _dominated(version: int, scores: Mapping[int, Sequence[float]]) -> bool:
    mine = scores[version]
    for other, theirs in scores.items():
        if other == version:
            continue
        if all(t >= m for t, m in zip(theirs, mine, strict=True)) and any(
            t > m for t, m in zip(theirs, mine, strict=True)
        ):
            return True
    return False
