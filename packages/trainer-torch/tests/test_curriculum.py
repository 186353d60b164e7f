"""The signal curriculum: each step's kinds are drawn when the step begins, weighed by what their last group showed."""

import collections
import random

import pytest

from relight.models import Transition
from relight.steps import group_id
from relight_torch.curriculum import SignalCurriculum

KINDS = ("solved", "unsolved", "mixed", "fresh")
TASKS = [{"id": f"{kind}-{n}", "kind": kind} for kind in KINDS for n in range(30)]


def group(step: int, position: int, right: int, samples: int = 8) -> list[Transition]:
    """One group's transitions, a call per sample, ``right`` of them rewarded."""
    return [
        Transition(
            rollout_id=f"s{step}-p{position}-r{n}", attempt_id=f"a{n}", group_id=group_id(step, position), step=0,
            prompt_token_ids=[1], response_token_ids=[2], reward=1.0 if n < right else 0.0,
        )
        for n in range(samples)
    ]  # fmt: skip


def observe_step(curriculum: SignalCurriculum, step: int, right_by_kind: dict[str, int]) -> None:
    """What GRPO's callback hands over after ``step``: each drawn task's group, rewarded by its kind."""
    size = 2
    batch = curriculum[(step - 1) * size : step * size]
    transitions = [t for i, task in enumerate(batch) for t in group(step, i, right_by_kind[str(task["kind"])])]
    curriculum.observe(transitions, {})


def test_kinds_whose_groups_are_flat_come_less_often_than_kinds_with_signal() -> None:
    curriculum = SignalCurriculum(TASKS, 400, 2, random.Random(3), "kind")
    right = {"solved": 8, "unsolved": 0, "mixed": 4, "fresh": 3}
    for step in range(1, 201):
        observe_step(curriculum, step, right)
    counts = collections.Counter(str(task["kind"]) for task in curriculum[40:])
    assert curriculum.rates == {"solved": 1.0, "unsolved": 0.0, "mixed": 0.5, "fresh": 0.375}
    for learnable in ("mixed", "fresh"):
        for flat in ("solved", "unsolved"):
            assert counts[learnable] > 2 * counts[flat], counts
    assert min(counts["solved"], counts["unsolved"]) > 0, "a flat kind still comes now and then"


def test_a_step_draws_distinct_kinds_and_a_kind_repeats_no_task_within_a_pass() -> None:
    curriculum = SignalCurriculum(TASKS, 60, 4, random.Random(0), "kind")
    for start in range(0, 60, 4):
        assert len({task["kind"] for task in curriculum[start : start + 4]}) == 4
    ids = [task["id"] for task in curriculum]
    assert len(set(ids)) == len(ids) == 60


def test_a_step_is_drawn_once_whoever_reads_it_and_the_same_seed_draws_the_same() -> None:
    first = SignalCurriculum(TASKS, 10, 4, random.Random(5), "kind")
    again = SignalCurriculum(TASKS, 10, 4, random.Random(5), "kind")
    assert first[0:4] == first[0:4] == again[0:4]
    assert list(first) == list(again)
    assert first[-1] == first[9]
    assert first[8:12] == first[8:10], "the last step holds what is left of the count"
    with pytest.raises(IndexError):
        first[10]
