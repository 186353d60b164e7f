"""The per-task Pareto front and the best: which versions stay parents, which one is published."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from relight_apo.frontier import best, front, pick_parent


def test_a_version_that_alone_solves_a_task_stays_on_the_front_though_its_mean_is_lower() -> None:
    scores = {0: [1.0, 1.0, 0.0], 1: [0.0, 0.0, 1.0]}
    assert front(scores) == {0: 2, 1: 1}
    assert best(scores) == 0


def test_a_dominated_version_leaves_the_front() -> None:
    scores = {0: [1.0, 0.0, 0.0], 1: [1.0, 1.0, 0.0], 2: [0.0, 0.0, 1.0]}
    assert set(front(scores)) == {1, 2}, "1 is as good as 0 everywhere and better on one task"


def test_parents_are_drawn_in_proportion_to_the_tasks_they_lead() -> None:
    scores = {0: [1.0, 1.0, 1.0, 0.0], 1: [0.0, 0.0, 0.0, 1.0]}
    rng = random.Random(0)
    drawn = Counter(pick_parent(scores, rng) for _ in range(4000))
    assert drawn[0] / 4000 == pytest.approx(0.75, abs=0.03)


def test_an_equal_newcomer_never_replaces_the_best() -> None:
    assert best({3: [1.0, 0.0], 7: [0.0, 1.0]}) == 3
    assert best({3: [1.0, 0.0], 7: [1.0, 0.5]}) == 7


def test_no_version_is_no_parent() -> None:
    with pytest.raises(ValueError, match="no prompt version"):
        pick_parent({}, random.Random(0))
