"""The recipes' training draw: shuffled passes over the tasks, or passes that take each kind of task in turn."""

import collections
import random

from relight_torch.recipes.warm_start_grpo import draw_tasks

SIZES = {"buy": 40, "spend": 4, "save": 16}
TASKS = [{"id": f"{kind}-{n}", "kind": kind} for kind, many in SIZES.items() for n in range(many)]


def test_a_balanced_draw_takes_every_kind_in_turn_until_one_runs_out() -> None:
    drawn = draw_tasks(TASKS, 15, random.Random(1), balance_by="kind")
    turns = [sorted(task["kind"] for task in drawn[i : i + 3]) for i in range(0, 12, 3)]
    assert turns == [["buy", "save", "spend"]] * 4
    counts = collections.Counter(task["kind"] for task in drawn)
    assert counts["spend"] == 4
    assert sorted([counts["buy"], counts["save"]]) == [5, 6], counts
    assert len({task["id"] for task in drawn}) == 15, "one pass: no task twice"


def test_a_plain_draw_is_a_shuffled_pass_then_another() -> None:
    drawn = draw_tasks(TASKS, 70, random.Random(1))
    assert sorted(task["id"] for task in drawn[:60]) == sorted(task["id"] for task in TASKS)
    assert drawn[:60] != TASKS
    assert len({task["id"] for task in drawn[60:]}) == 10


def test_the_same_seed_draws_the_same_tasks() -> None:
    assert draw_tasks(TASKS, 30, random.Random(7), "kind") == draw_tasks(TASKS, 30, random.Random(7), "kind")
