"""An in-memory store: the reference backend, for tests and for runs that need nothing kept.

All state sits in dicts changed only between awaits, so no lock is needed; the store belongs to
the event loop that first waits on it. Waiters sleep on :class:`~relight.stores._changes.Changes`
and wake on a change or at the next lease expiry.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence

from pydantic import JsonValue

from relight.records import (
    Attempt,
    AttemptStatus,
    Mode,
    Resources,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    Span,
    StoreStats,
)
from relight.store import DEFAULT_LEASE_SECONDS
from relight.stores import _rules
from relight.stores._changes import Changes, deadline_after
from relight.summaries import RolloutSummary, SpanFacts, SummaryFilter, SummaryPage, latest_attempt_id

__all__ = ["InMemoryStore"]


class InMemoryStore:
    """A :class:`relight.store.Store` that keeps everything in this process's memory."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rollouts: OrderedDict[str, Rollout] = OrderedDict()
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._attempts: dict[str, list[Attempt]] = {}
        self._running: dict[str, tuple[str, int]] = {}
        """attempt id → (rollout id, index in its rollout's attempts), for the running ones."""
        self._spans: dict[str, dict[tuple[str, str], Span]] = {}
        """rollout id → (attempt id, span id) → span, in arrival order."""
        self._span_count = 0
        self._sequence = itertools.count()
        self._resources: list[Resources] = []
        self._facts: dict[str, SpanFacts] = {}
        """rollout id → the facts of its latest attempt's spans (see :mod:`relight.summaries`)."""
        self._changed: dict[str, int] = {}
        """rollout id → the change number of its summary's last change."""
        self._change = 0
        self._changes = Changes(clock)
        self._closed = False

    # -- rollouts -----------------------------------------------------------------------------

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        self._check_open()
        _rules.check_requests(requests)
        now = self._clock()
        result: list[Rollout] = []
        for request in requests:
            existing = self._rollouts.get(request.rollout_id or "")
            if existing is not None:
                result.append(existing)
                continue
            rollout = _rules.new_rollout(request, now)
            self._rollouts[rollout.rollout_id] = rollout
            self._attempts[rollout.rollout_id] = []
            self._queue[rollout.rollout_id] = None
            self._touch(rollout.rollout_id)
            result.append(rollout)
        self._changes.notify()
        return result

    async def record_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        worker_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> list[tuple[Rollout, Attempt]]:
        self._check_open()
        recorded = _rules.recorded(requests, worker_id, lease_seconds, self._clock())
        for rollout, _ in recorded:
            if rollout.rollout_id in self._rollouts:
                raise _rules.rollout_exists(rollout.rollout_id)
        for rollout, attempt in recorded:
            self._rollouts[rollout.rollout_id] = rollout
            self._attempts[rollout.rollout_id] = [attempt]
            self._running[attempt.attempt_id] = (rollout.rollout_id, 0)
            self._facts[rollout.rollout_id] = SpanFacts()
            self._touch(rollout.rollout_id)
        self._changes.notify()
        return recorded

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float = 0.0,
        mode: Mode | None = None,
    ) -> tuple[Rollout, Attempt] | None:
        self._check_open()
        _rules.check_lease_seconds(lease_seconds)
        deadline = deadline_after(timeout)
        while True:
            self._check_open()
            seen = self._changes.version
            self._reap_expired()
            rollout_id = next((rid for rid in self._queue if mode is None or self._rollouts[rid].mode is mode), None)
            if rollout_id is not None:
                del self._queue[rollout_id]
                rollout, attempt = _rules.start_attempt(
                    self._rollouts[rollout_id], worker_id, lease_seconds, self._clock()
                )
                self._rollouts[rollout_id] = rollout
                self._attempts[rollout_id].append(attempt)
                self._facts[rollout_id] = SpanFacts()
                self._touch(rollout_id)
                self._running[attempt.attempt_id] = (rollout_id, len(self._attempts[rollout_id]) - 1)
                self._changes.notify()
                return rollout, attempt
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=self._next_expiry()):
                return None

    async def heartbeat(
        self, rollout_id: str, attempt_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Attempt:
        self._check_open()
        _rules.check_lease_seconds(lease_seconds)
        self._reap_expired()
        index, attempt = self._find_attempt(rollout_id, attempt_id)
        _rules.require_running(attempt)
        attempt = attempt.model_copy(update={"lease_expires_at": self._clock() + lease_seconds})
        self._attempts[rollout_id][index] = attempt
        return attempt

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus,
        *,
        error: str | None = None,
    ) -> Rollout:
        self._check_open()
        _rules.check_client_status(status)
        self._reap_expired()
        index, attempt = self._find_attempt(rollout_id, attempt_id)
        rollout, ended = _rules.end_attempt(self._rollouts[rollout_id], attempt, status, error, self._clock())
        self._store_outcome(rollout, index, ended)
        return rollout

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        self._check_open()
        for rollout_id in rollout_ids:
            self._get(rollout_id)
        now = self._clock()
        for rollout_id in rollout_ids:
            rollout, cancelled = _rules.cancel_rollout(self._rollouts[rollout_id], self._attempts[rollout_id], now)
            self._rollouts[rollout_id] = rollout
            self._touch(rollout_id)
            self._queue.pop(rollout_id, None)
            for attempt in cancelled:
                _, index = self._running.pop(attempt.attempt_id)
                self._attempts[rollout_id][index] = attempt
        self._changes.notify()
        return [self._rollouts[rid] for rid in rollout_ids]

    async def update_metadata(self, rollout_id: str, metadata: Mapping[str, JsonValue]) -> Rollout:
        self._check_open()
        rollout = self._rollouts[rollout_id] = _rules.with_metadata(self._get(rollout_id), metadata)
        self._touch(rollout_id)
        self._changes.notify()
        return rollout

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        self._check_open()
        for rollout_id in rollout_ids:
            self._get(rollout_id)
        deadline = deadline_after(timeout)
        while True:
            self._check_open()
            seen = self._changes.version
            self._reap_expired()
            rollouts = [self._rollouts[rid] for rid in rollout_ids]
            if all(r.is_finished for r in rollouts) or not await self._changes.wait(
                seen, deadline=deadline, next_expiry=self._next_expiry()
            ):
                return rollouts

    async def get_rollout(self, rollout_id: str) -> Rollout:
        self._check_open()
        return self._get(rollout_id)

    async def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        group_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Rollout]:
        self._check_open()
        _rules.check_page(limit, offset)
        matching = [
            r
            for r in self._rollouts.values()
            if (status is None or r.status is status)
            and (mode is None or r.mode is mode)
            and (group_id is None or r.group_id == group_id)
        ]
        end = None if limit is None else offset + limit
        return matching[offset:end]

    async def list_summaries(
        self, where: SummaryFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> SummaryPage:
        self._check_open()
        _rules.check_page(limit, offset)
        where = where or SummaryFilter()
        newest_first = list(reversed(self._rollouts))
        place = {rollout_id: index for index, rollout_id in enumerate(newest_first)}
        older_than, newer_than = (_rules.cursor_place(place, where, field) for field in ("before", "after"))
        summaries = (
            RolloutSummary.of(
                self._rollouts[rollout_id], self._facts.get(rollout_id) or SpanFacts(), self._changed[rollout_id]
            )
            for rollout_id in newest_first
        )
        matching = [(index, summary) for index, summary in enumerate(summaries) if where.matches(summary)]
        total = len(matching)
        if where.changed_after is not None:
            matching.sort(key=lambda placed: placed[1].changed)
        bounded = [
            (index, summary)
            for index, summary in matching
            if (older_than is None or index > older_than) and (newer_than is None or index < newer_than)
        ]
        if newer_than is not None:  # the nearest rows above the cursor
            rows = bounded[max(0, len(bounded) - offset - limit) : max(0, len(bounded) - offset)]
        else:
            rows = bounded[offset : offset + limit]
        if older_than is None and newer_than is None:
            position = offset
        elif rows:
            position = sum(index < rows[0][0] for index, _ in matching)
        else:
            position = total if newer_than is None else 0
        return SummaryPage(total=total, offset=position, rows=[row for _, row in rows], changed=self._change)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        self._check_open()
        self._get(rollout_id)
        return list(self._attempts[rollout_id])

    # -- spans --------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> None:
        self._check_open()
        _rules.check_spans(spans)
        for span in spans:
            self._find_attempt(span.rollout_id, span.attempt_id)
        fresh: dict[tuple[str, str, str], Span] = {}
        for span in spans:
            key = (span.rollout_id, span.attempt_id, span.span_id)
            earlier = self._spans.get(span.rollout_id, {}).get(key[1:]) or fresh.get(key)
            if earlier is None:
                fresh[key] = span
            elif not _rules.same_span(earlier, span):
                raise _rules.conflicting_span(span)
        for (rollout_id, attempt_id, span_id), span in fresh.items():
            stored = self._spans.setdefault(rollout_id, {})
            stored[attempt_id, span_id] = span.model_copy(update={"sequence_id": next(self._sequence)})
            self._span_count += 1
            if attempt_id == latest_attempt_id(self._rollouts[rollout_id]):
                self._facts[rollout_id].add(span)
                self._touch(rollout_id)

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        self._check_open()
        self._get(rollout_id)
        stored = self._spans.get(rollout_id, {}).values()
        return [span for span in stored if attempt_id is None or span.attempt_id == attempt_id]

    # -- resources ----------------------------------------------------------------------------

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        self._check_open()
        _rules.check_resources(items)
        resources = Resources(version=len(self._resources), items=dict(items), created_at=self._clock())
        self._resources.append(resources)
        return resources

    async def get_resources(self, version: int | None = None) -> Resources:
        self._check_open()
        _rules.check_version(version)
        if version is None and self._resources:
            return self._resources[-1]
        if version is None or not 0 <= version < len(self._resources):
            raise _rules.resources_not_found(version, len(self._resources))
        return self._resources[version]

    async def stats(self) -> StoreStats:
        self._check_open()
        return StoreStats(
            rollouts_by_status=dict(Counter(r.status.value for r in self._rollouts.values())),
            attempts_by_status=dict(Counter(a.status.value for attempts in self._attempts.values() for a in attempts)),
            spans=self._span_count,
            resources_versions=len(self._resources),
        )

    async def close(self) -> None:
        self._closed = True
        self._changes.notify()  # waiters wake and find the store closed

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise _rules.closed()

    def _get(self, rollout_id: str) -> Rollout:
        try:
            return self._rollouts[rollout_id]
        except KeyError:
            raise _rules.rollout_not_found(rollout_id) from None

    def _find_attempt(self, rollout_id: str, attempt_id: str) -> tuple[int, Attempt]:
        self._get(rollout_id)
        for index, attempt in enumerate(self._attempts[rollout_id]):
            if attempt.attempt_id == attempt_id:
                return index, attempt
        raise _rules.attempt_not_found(rollout_id, attempt_id)

    def _touch(self, rollout_id: str) -> None:
        """Give the rollout's summary the next change number."""
        self._change += 1
        self._changed[rollout_id] = self._change

    def _store_outcome(self, rollout: Rollout, index: int, attempt: Attempt) -> None:
        self._rollouts[rollout.rollout_id] = rollout
        self._touch(rollout.rollout_id)
        self._attempts[rollout.rollout_id][index] = attempt
        self._running.pop(attempt.attempt_id, None)
        if rollout.status is RolloutStatus.QUEUED:
            self._queue[rollout.rollout_id] = None
        self._changes.notify()

    def _reap_expired(self) -> None:
        now = self._clock()
        for rollout_id, index in list(self._running.values()):
            attempt = self._attempts[rollout_id][index]
            if attempt.lease_expires_at <= now:
                rollout, ended = _rules.end_attempt(
                    self._rollouts[rollout_id],
                    attempt,
                    AttemptStatus.EXPIRED,
                    _rules.expiry_error(attempt),
                    now,
                )
                self._store_outcome(rollout, index, ended)

    def _next_expiry(self) -> float | None:
        return min(
            (self._attempts[rid][index].lease_expires_at for rid, index in self._running.values()),
            default=None,
        )
