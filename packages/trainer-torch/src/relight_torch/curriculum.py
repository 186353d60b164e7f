"""A training draw that follows the learning signal: kinds of task whose last group was flat come less often.

GRPO learns only from groups whose samples disagree. On calc, a warm-started SmolLM2 gets some
templates right in every sample once RL has taught them and others (three-step problems) right in
none, so with a balanced draw over half of a run's groups came back flat: samples, and the
slowest rollouts (a policy that cannot solve a problem calls the calculator to the limit), spent
for no update. :class:`SignalCurriculum` draws each step's tasks when the step begins, weighing
every kind by what its last group showed: ``p(1 - p)`` (the variance of a sample's reward, which is
what GRPO's advantages are made of) plus a floor, so a kind flat at 0 or 1 still comes now and
then and is seen again once the policy has moved. A kind not yet seen weighs as much as a kind at
one half. This is the online difficulty filtering of DAPO's dynamic sampling and verl's curriculum
samplers, done before sampling instead of after, so no rollout is spent on the groups it skips.

It is a ``Sequence`` because that is what :meth:`relight.Trainer.fit` takes: the synchronous loop reads
step ``k``'s batch as the slice ``[(k - 1) * batch_size : k * batch_size]`` when step ``k`` begins, after
step ``k - 1``'s update, whose transitions this object observes as a GRPO update callback.
"""

from __future__ import annotations

import collections
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import overload

from pydantic import JsonValue

from relight.models import Transition
from relight.steps import group_id

__all__ = ["SignalCurriculum"]

Task = Mapping[str, JsonValue]


class SignalCurriculum(Sequence[Task]):
    """``count`` tasks in steps of ``batch_size`` distinct kinds (``kind_field``), drawn as each step begins.

    Pass it to :meth:`relight.Trainer.fit` as the training set and :meth:`observe` to GRPO as an update
    callback. The draw is deterministic for a seed and the same observed rewards.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        count: int,
        batch_size: int,
        rng: random.Random,
        kind_field: str,
        *,
        floor: float = 0.05,
    ) -> None:
        if count < 1 or batch_size < 1:
            raise ValueError(f"count and batch_size must be at least 1, got {count} and {batch_size}")
        self._by_kind: dict[str, list[Task]] = collections.defaultdict(list)
        for task in tasks:
            self._by_kind[str(task.get(kind_field))].append(task)
        if not self._by_kind:
            raise ValueError("SignalCurriculum needs at least one task")
        self._queues: dict[str, list[Task]] = {kind: [] for kind in self._by_kind}
        self._count, self._batch_size, self._rng, self._floor = count, batch_size, rng, floor
        self._drawn: list[Task] = []
        self._kind_of_group: dict[str, str] = {}
        self.rates: dict[str, float] = {}
        """Each kind's share of right samples in its last observed group."""

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Task: ...
    @overload
    def __getitem__(self, index: slice) -> list[Task]: ...
    def __getitem__(self, index: int | slice) -> Task | list[Task]:
        if isinstance(index, slice):
            positions = range(*index.indices(self._count))
            if positions:
                self._draw_through(max(positions))
            return self._drawn[index]
        position = index + self._count if index < 0 else index
        if not 0 <= position < self._count:
            raise IndexError(f"task {index} of {self._count}")
        self._draw_through(position)
        return self._drawn[position]

    def __iter__(self) -> Iterator[Task]:
        return (self[i] for i in range(self._count))

    def weight(self, kind: str) -> float:
        """How likely ``kind`` is drawn: ``p(1 - p)`` of its last group (1/4 before it is seen), plus the floor."""
        rate = self.rates.get(kind)
        return self._floor + (0.25 if rate is None else rate * (1.0 - rate))

    def observe(self, transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        """A GRPO update callback: each group's share of right samples becomes its kind's rate."""
        del metrics
        returns: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for transition in transitions:
            returns[transition.group_id][transition.rollout_id] = transition.reward
        for group, rewards in returns.items():
            kind = self._kind_of_group.get(group)
            if kind is not None:
                self.rates[kind] = sum(reward >= 1.0 for reward in rewards.values()) / len(rewards)

    def _draw_through(self, position: int) -> None:
        while len(self._drawn) <= position:
            step = len(self._drawn) // self._batch_size + 1
            room = min(self._batch_size, self._count - len(self._drawn))
            for index, kind in enumerate(self._kinds(room)):
                self._kind_of_group[group_id(step, index)] = kind
                self._drawn.append(self._next_of(kind))

    def _kinds(self, room: int) -> list[str]:
        """``room`` kinds (distinct while there are enough), each taken with probability in proportion to its weight.

        Weighted sampling without replacement: each kind's key is an exponential draw of rate ``w`` and the
        smallest keys win (Efraimidis and Spirakis' ``u ** (1 / w)``, on a log scale).
        """
        kinds = sorted(self._by_kind)
        keyed = sorted(kinds, key=lambda kind: -math.log(1.0 - self._rng.random()) / self.weight(kind))
        return [keyed[i % len(keyed)] for i in range(room)]

    def _next_of(self, kind: str) -> Task:
        """The next task of ``kind``: shuffled passes over that kind's tasks."""
        queue = self._queues[kind]
        if not queue:
            queue += self._by_kind[kind]
            self._rng.shuffle(queue)
        return queue.pop()
