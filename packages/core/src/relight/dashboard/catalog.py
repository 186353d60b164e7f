"""The dashboard's index of a store's rollouts: one small row each, kept current by a light poll.

The store protocol lists rollouts by status, mode and group; the dashboard also filters by reward,
role, step, policy version, attempts and why calls were not trained, none of which a store indexes.
So the catalog reads each rollout once (its attempts and spans, judged by
:meth:`relight.transitions.TransitionBuilder.explain`) and keeps a :class:`RolloutRow`; finished
rollouts never change again, so after the first pass a refresh reads only rollouts that are new or
still unfinished. Filtering 100,000 rows in memory takes tens of milliseconds (see
``benchmarks/dashboard_load.py``), and works the same over every backend.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from relight.models import Mode, Rollout, RolloutStatus
from relight.store import Store
from relight.transitions import TransitionBuilder, episode_return
from relight.verdicts import Reason, RolloutVerdict

__all__ = ["Catalog", "RolloutFilter", "RolloutRow"]

_PAGE = 1000
"""Rollouts read per list call while catching up."""
_JUDGE_CHUNK = 64
"""Rollouts judged concurrently; the loop yields between chunks so requests are answered meanwhile."""


@dataclass(slots=True)
class RolloutRow:
    """What the rollout list shows of one rollout, and filters on."""

    position: int
    """Its place in enqueue order."""
    rollout: Rollout
    judged: bool = False
    """Whether its spans have been read: reward, roles, calls and reasons are known."""
    reward: float | None = None
    roles: tuple[str, ...] = ()
    calls: int = 0
    trained: int = 0
    reasons: dict[str, int] = field(default_factory=dict[str, int])
    """Calls left out, by :class:`relight.verdicts.Reason` value."""

    @property
    def step(self) -> int | None:
        step = self.rollout.metadata.get("step")
        return step if isinstance(step, int) else None

    def to_json(self) -> dict[str, object]:
        rollout = self.rollout
        return {
            "rollout_id": rollout.rollout_id,
            "status": rollout.status.value,
            "mode": rollout.mode.value,
            "group_id": rollout.group_id,
            "step": self.step,
            "policy_version": rollout.resources_version,
            "attempts": rollout.attempt_count,
            "max_attempts": rollout.max_attempts,
            "reward": self.reward,
            "roles": list(self.roles),
            "calls": self.calls,
            "trained": self.trained,
            "reasons": self.reasons,
            "judged": self.judged,
            "created_at": rollout.created_at,
            "finished_at": rollout.finished_at,
            "error": _last_line(rollout.error),
        }


@dataclass(frozen=True, slots=True)
class RolloutFilter:
    """Which rows the list shows; every field left None matches all."""

    status: RolloutStatus | None = None
    mode: Mode | None = None
    group_id: str | None = None
    role: str | None = None
    step: int | None = None
    policy_version: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    min_attempts: int | None = None
    reason: Reason | None = None
    """Only rollouts with at least one call left out for this reason."""

    def predicates(self) -> list[Callable[[RolloutRow], bool]]:
        """One test per field that is set, so unset fields cost nothing per row."""
        tests: list[Callable[[RolloutRow], bool]] = []
        if (status := self.status) is not None:
            tests.append(lambda row: row.rollout.status is status)
        if (mode := self.mode) is not None:
            tests.append(lambda row: row.rollout.mode is mode)
        if (group := self.group_id) is not None:
            tests.append(lambda row: row.rollout.group_id == group)
        if (role := self.role) is not None:
            tests.append(lambda row: role in row.roles)
        if (step := self.step) is not None:
            tests.append(lambda row: row.step == step)
        if (version := self.policy_version) is not None:
            tests.append(lambda row: row.rollout.resources_version == version)
        if (low := self.min_reward) is not None:
            tests.append(lambda row: row.reward is not None and row.reward >= low)
        if (high := self.max_reward) is not None:
            tests.append(lambda row: row.reward is not None and row.reward <= high)
        if (attempts := self.min_attempts) is not None:
            tests.append(lambda row: row.rollout.attempt_count >= attempts)
        if (reason := self.reason) is not None:
            tests.append(lambda row: reason.value in row.reasons)
        return tests


class Catalog:
    """Rows for every rollout of ``store``, brought up to date by :meth:`refresh`.

    Args:
        builder: judges calls as the trainer does (its role filter, credit, ``include_failed``).
    """

    def __init__(self, store: Store, builder: TransitionBuilder | None = None) -> None:
        self.store = store
        self.builder = builder or TransitionBuilder()
        self.rows: list[RolloutRow] = []
        self._by_id: dict[str, RolloutRow] = {}
        self._open: dict[str, RolloutRow] = {}
        """Rows not yet judged for good: unfinished rollouts, and finished ones not read yet."""
        self.version = 0
        """Bumped whenever a row changes; the live view refetches when it moves."""
        self._lock = asyncio.Lock()
        self._moved = asyncio.Event()
        self._curves: tuple[int, list[dict[str, object]]] = (-1, [])

    def row(self, rollout_id: str) -> RolloutRow | None:
        return self._by_id.get(rollout_id)

    @property
    def pending(self) -> int:
        """Rows whose spans have not been read yet (the first pass over a large store takes a while)."""
        return sum(not row.judged for row in self._open.values())

    async def refresh(self) -> bool:
        """Read what changed since the last refresh; returns whether anything did."""
        async with self._lock:
            changed = await self._add_new()
            changed |= await self._update_open()
            if changed:
                self._bump()
            return changed

    def _bump(self) -> None:
        self.version += 1
        self._moved.set()
        self._moved = asyncio.Event()

    async def wait_change(self, seen: int, *, timeout: float, stop: asyncio.Event) -> bool:
        """Sleep until :attr:`version` moves past ``seen``, ``stop`` is set or ``timeout`` passes; True if it moved."""
        if self.version == seen:
            waits = [asyncio.ensure_future(self._moved.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        return self.version != seen

    async def _add_new(self) -> bool:
        added = False
        while True:
            page = await self.store.list_rollouts(limit=_PAGE, offset=len(self.rows))
            for rollout in page:
                row = RolloutRow(len(self.rows), rollout)
                self.rows.append(row)
                self._by_id[rollout.rollout_id] = row
                self._open[rollout.rollout_id] = row
            added |= bool(page)
            if len(page) < _PAGE:
                return added

    async def _update_open(self) -> bool:
        """Re-read unfinished rollouts; judge those that have finished (and, once, those still running)."""
        unfinished = [row for row in self._open.values() if not row.rollout.is_finished]
        changed = False
        if unfinished:
            current = await self.store.wait([row.rollout.rollout_id for row in unfinished], timeout=0)
            for row, rollout in zip(unfinished, current, strict=True):
                if rollout != row.rollout:
                    row.rollout, row.judged, changed = rollout, False, True
        stale = [row for row in self._open.values() if not row.judged]
        for start in range(0, len(stale), _JUDGE_CHUNK):
            await asyncio.gather(*(self._judge(row) for row in stale[start : start + _JUDGE_CHUNK]))
            self._bump()  # a first pass over a large store shows its progress as it goes
            changed = True
        for row in stale:
            if row.rollout.is_finished:
                del self._open[row.rollout.rollout_id]
        return changed

    async def _judge(self, row: RolloutRow) -> None:
        rollout = row.rollout
        attempts = await self.store.list_attempts(rollout.rollout_id)
        spans = await self.store.query_spans(rollout.rollout_id, attempts[-1].attempt_id) if attempts else []
        verdict = self.builder.explain_spans(rollout, attempts[-1:], spans, build=False)
        fill(row, verdict, episode_return(spans))

    # -- views --------------------------------------------------------------------------------

    def select(self, where: RolloutFilter, *, offset: int, limit: int) -> tuple[int, list[RolloutRow]]:
        """The total that match and one page of them, newest first."""
        tests = where.predicates()
        if not tests:  # the unfiltered list: a slice, whatever the store's size
            end = max(0, len(self.rows) - offset)
            return len(self.rows), self.rows[max(0, end - limit) : end][::-1]
        if len(tests) == 1:
            matching = list(filter(tests[0], reversed(self.rows)))
        else:
            matching = [row for row in reversed(self.rows) if all(test(row) for test in tests)]
        return len(matching), matching[offset : offset + limit]

    def curves(self) -> list[dict[str, object]]:
        """Per policy version: train and validation reward, throughput, failures and what was kept.

        Computed once per :attr:`version`: every open page asks again at each change.
        """
        if self._curves[0] != self.version:
            by_version: dict[int, list[RolloutRow]] = {}
            for row in self.rows:
                if row.rollout.resources_version is not None:
                    by_version.setdefault(row.rollout.resources_version, []).append(row)
            self._curves = (self.version, [_point(version, rows) for version, rows in sorted(by_version.items())])
        return self._curves[1]


def fill(row: RolloutRow, verdict: RolloutVerdict, reward: float | None) -> None:
    """Put what a verdict says into a row."""
    row.reward = reward
    row.roles = tuple(sorted({call.role for call in verdict.calls if call.role is not None}))
    row.calls = len(verdict.calls)
    row.trained = sum(call.trained for call in verdict.calls)
    row.reasons = {reason.value: count for reason, count in verdict.reasons().items()}
    row.judged = True


def _point(version: int, rows: Sequence[RolloutRow]) -> dict[str, object]:
    train = [row for row in rows if row.rollout.mode is Mode.TRAIN]
    val = [row for row in rows if row.rollout.mode is Mode.VAL]
    dropped: Counter[str] = Counter()
    for row in train:
        dropped.update(row.reasons)
    finished = [row.rollout for row in train if row.rollout.finished_at is not None]
    span = (max(r.finished_at or 0.0 for r in finished) - min(r.created_at for r in finished)) if finished else 0.0
    return {
        "policy_version": version,
        "steps": sorted({row.step for row in train if row.step is not None}),
        "train_reward": _mean(row.reward for row in train),
        "val_reward": _mean(row.reward for row in val),
        "train_rollouts": len(train),
        "val_rollouts": len(val),
        "rollouts_per_s": len(finished) / span if span > 0 else None,
        "failed": sum(row.rollout.status is RolloutStatus.FAILED for row in rows),
        "trained_calls": sum(row.trained for row in train),
        "dropped_calls": sum(dropped.values()),
        "dropped": dict(dropped),
    }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None


def _last_line(error: str | None) -> str | None:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else None
