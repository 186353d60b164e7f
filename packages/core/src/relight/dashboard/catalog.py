"""The dashboard's view of a store: rollout pages straight from the store's summaries, curves kept by following them.

The rollout list is one query of :meth:`relight.store.Store.list_summaries` per page, whatever the
store's size. The runs page's curves need every rollout, so the catalog keeps one small
:class:`_Point` per rollout, brought up to date by reading the summaries that changed since the last
refresh (a light poll: nothing when nothing moved). It re-reads a short window of changes behind
the newest it saw, because a PostgreSQL transaction may commit after one that took a higher change
number. Each refresh that moves something bumps :attr:`Catalog.version`, which the page follows.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from relight.dashboard.reasons import reasons_of
from relight.errors import NotFoundError
from relight.records import Mode, RolloutStatus
from relight.store import Store
from relight.summaries import RolloutSummary, SummaryFilter, SummaryPage
from relight.transitions.builder import TransitionBuilder
from relight.transitions.run_config import POLICY_METRICS_ITEM, POLICY_VERSIONS_ITEM, builder_of_run, describe

__all__ = ["Catalog", "row_json"]

_PAGE = 1000
"""Summaries read per call while catching up."""
_WINDOW = 256
"""Change numbers re-read behind the newest seen (transactions that committed out of number order)."""


@dataclass(frozen=True, slots=True)
class _Point:
    """What the curves need of one rollout."""

    mode: Mode
    version: int | None
    step: int | None
    status: RolloutStatus
    reward: float | None
    trained: int
    reasons: tuple[tuple[str, int], ...]
    created_at: float
    finished_at: float | None
    retried: int = 0
    """Earlier attempts the rollout retried (their calls are counted on its page, not in the list's summary)."""


def row_json(summary: RolloutSummary, builder: TransitionBuilder) -> dict[str, object]:
    """A row of the rollout list."""
    rollout = summary.rollout
    reasons = reasons_of(summary, builder)
    return {
        "rollout_id": rollout.rollout_id,
        "status": rollout.status.value,
        "mode": rollout.mode.value,
        "group_id": rollout.group_id,
        "step": summary.step,
        "policy_version": rollout.resources_version,
        "attempts": rollout.attempt_count,
        "max_attempts": rollout.max_attempts,
        "reward": summary.reward,
        "roles": sorted(summary.roles),
        "calls": summary.calls,
        "trained": summary.calls - sum(reasons.values()),
        "reasons": {reason.value: count for reason, count in sorted(reasons.items())},
        "created_at": rollout.created_at,
        "finished_at": rollout.finished_at,
        "error": _last_line(rollout.error),
    }


class Catalog:
    """The store's rollouts as the dashboard shows them.

    Args:
        builder: judges calls as the trainer does (its role filter, ``include_failed``).
    """

    def __init__(self, store: Store, builder: TransitionBuilder | None = None) -> None:
        self.store = store
        self.builder = builder or TransitionBuilder()
        self._builder_given = builder is not None
        """Without one, the run's own (:func:`relight.transitions.run_config.builder_of_run`), followed as it
        publishes."""
        self.roles: set[str] = set()
        """Every role a role span has named: the reason filter's ``filtered role`` needs them."""
        self.pending = 0
        """Summaries not read yet (the first refresh of a large store reads them in pages)."""
        self.version = 0
        """Bumped whenever a rollout changes; the live view refetches when it moves."""
        self._points: dict[str, _Point] = {}
        self._seen = 0
        self._lock = asyncio.Lock()
        self._moved = asyncio.Event()
        self._curves: tuple[int, list[dict[str, object]]] = (-1, [])
        self._policies: dict[int, dict[str, dict[str, JsonValue]]] = {}
        """Per resources version of a run with several policies: what each policy's update reported
        (:data:`relight.transitions.run_config.POLICY_METRICS_ITEM`) and its version. A version never changes."""

    @property
    def count(self) -> int:
        """Rollouts read so far."""
        return len(self._points)

    async def page(self, where: SummaryFilter, *, offset: int, limit: int) -> SummaryPage:
        """One page of the rollout list, newest first: one query of the store."""
        return await self.store.list_summaries(where, limit=limit, offset=offset)

    async def refresh(self) -> bool:
        """Read the summaries that changed since the last refresh; returns whether any rollout moved."""
        async with self._lock:
            moved = await self._follow_run()
            after = max(0, self._seen - _WINDOW)
            while True:
                page = await self.store.list_summaries(SummaryFilter(changed_after=after), limit=_PAGE)
                for summary in page.rows:
                    point = _point(summary, self.builder)
                    if self._points.get(summary.rollout.rollout_id) != point:
                        self._points[summary.rollout.rollout_id] = point
                        moved = True
                    self.roles.update(summary.roles)
                if page.rows:
                    after = page.rows[-1].changed
                    self._seen = max(self._seen, after)
                self.pending = page.total - len(page.rows)
                if moved:
                    self._bump()  # a first read of a large store shows its progress as it goes
                if len(page.rows) < _PAGE:
                    return await self._read_policies() or moved

    async def _read_policies(self) -> bool:
        """Read the per-policy figures of versions the rollouts name and that are not read yet (several policies)."""
        if self.builder.policies is None:
            return False
        versions = {point.version for point in self._points.values() if point.version is not None}
        read = False
        for version in sorted(versions - set(self._policies)):
            try:
                items = (await self.store.get_resources(version)).items
            except NotFoundError:
                continue
            self._policies[version] = _policy_figures(items, self.builder.policies)
            read = True
        if read:
            self._curves = (-1, [])
            self._bump()
        return read

    async def _follow_run(self) -> bool:
        """Judge with the role filter the run published; when it changes, every rollout is judged again."""
        if self._builder_given:
            return False
        run = await builder_of_run(self.store)
        if run is None or describe(run) == describe(self.builder):
            return False
        self.builder = run
        self._points.clear()
        self._policies.clear()
        self._seen = 0
        return True

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

    def curves(self) -> list[dict[str, object]]:
        """Per policy version: train and validation reward, throughput, failures and what was kept; with several
        policies, each policy's version and what the update that made this version reported for it
        (``policies``: loss, reward, calls trained and left out).

        Computed once per :attr:`version`: every open page asks again at each change.
        """
        if self._curves[0] != self.version:
            by_version: dict[int, list[_Point]] = {}
            for point in self._points.values():
                if point.version is not None:
                    by_version.setdefault(point.version, []).append(point)
            self._curves = (
                self.version,
                [
                    _curve_point(v, points) | ({"policies": self._policies[v]} if v in self._policies else {})
                    for v, points in sorted(by_version.items())
                ],
            )
        return self._curves[1]


def _point(summary: RolloutSummary, builder: TransitionBuilder) -> _Point:
    rollout = summary.rollout
    reasons = reasons_of(summary, builder)
    return _Point(
        mode=rollout.mode,
        version=rollout.resources_version,
        step=summary.step,
        status=rollout.status,
        reward=summary.reward,
        trained=summary.calls - sum(reasons.values()),
        reasons=tuple(sorted((reason.value, count) for reason, count in reasons.items())),
        created_at=rollout.created_at,
        finished_at=rollout.finished_at,
        retried=max(0, rollout.attempt_count - 1),
    )


def _curve_point(version: int, points: Sequence[_Point]) -> dict[str, object]:
    train = [point for point in points if point.mode is Mode.TRAIN]
    val = [point for point in points if point.mode is Mode.VAL]
    dropped: Counter[str] = Counter()
    for point in train:
        dropped.update(dict(point.reasons))
    finished = [point for point in train if point.finished_at is not None]
    span = (max(p.finished_at or 0.0 for p in finished) - min(p.created_at for p in finished)) if finished else 0.0
    return {
        "policy_version": version,
        "steps": sorted({point.step for point in train if point.step is not None}),
        "train_reward": _mean(point.reward for point in train),
        "val_reward": _mean(point.reward for point in val),
        "train_rollouts": len(train),
        "val_rollouts": len(val),
        "rollouts_per_s": len(finished) / span if span > 0 else None,
        "failed": sum(point.status is RolloutStatus.FAILED for point in points),
        "trained_calls": sum(point.trained for point in train),
        "dropped_calls": sum(dropped.values()),
        "dropped": dict(dropped),
        "retried_attempts": sum(point.retried for point in train),
    }


def _policy_figures(items: Mapping[str, JsonValue], policies: Mapping[str, object]) -> dict[str, dict[str, JsonValue]]:
    """Each policy's figures in one version's resources items: its version and the update's metrics."""
    metrics = items.get(POLICY_METRICS_ITEM)
    versions = items.get(POLICY_VERSIONS_ITEM)
    figures: dict[str, dict[str, JsonValue]] = {}
    for name in policies:
        own = metrics.get(name) if isinstance(metrics, dict) else None
        row: dict[str, JsonValue] = dict(own) if isinstance(own, dict) else {}
        if isinstance(versions, dict) and isinstance(version := versions.get(name), int):
            row["policy_version"] = version
        figures[name] = row
    return figures


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None


def _last_line(error: str | None) -> str | None:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else None
