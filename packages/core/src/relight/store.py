"""The store protocol: the one interface every backend implements and every other part talks to.

The queue of rollouts, the attempts that workers claim and keep alive, the spans they emit and the
resources the trainer publishes all live behind it. Every method is async so that one event loop
can drive runners, the gateway and the trainer together; every backend passes the conformance
suite in :mod:`relight_testing`. Rollouts usually enter through the queue (:meth:`Store.enqueue`);
work that ran elsewhere is recorded without it (:meth:`Store.record_rollouts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

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
from relight.summaries import SummaryFilter, SummaryPage

__all__ = ["DEFAULT_LEASE_SECONDS", "MAX_LEASE_SECONDS", "Store"]

DEFAULT_LEASE_SECONDS = 30.0
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
"""The longest lease a worker may take: beyond it an attempt of a dead worker would in effect never expire."""


@runtime_checkable
class Store(Protocol):
    """Where rollouts, attempts, spans and resources live.

    Raises :class:`relight.errors.NotFoundError` for unknown ids and
    :class:`relight.errors.LeaseLostError` when a worker acts on an attempt that is no longer its own.
    """

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        """Queue rollouts in order. A request whose ``rollout_id`` already exists returns the stored one."""
        ...

    async def record_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        worker_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> list[tuple[Rollout, Attempt]]:
        """Record rollouts that ran elsewhere: each is stored running, its one attempt already started by
        ``worker_id``, and never queued, so no runner can claim it.

        For work done outside the queue (traces imported from another system): the caller adds the
        attempt's spans, then ends it with :meth:`finish_attempt`, as a worker does after a claim, and
        may heartbeat it meanwhile. A recorded rollout is never retried (its ``max_attempts`` is 1):
        an attempt whose lease runs out fails it. All or nothing per call: a ``rollout_id`` that
        already exists (or repeats within the call) raises
        :class:`relight.errors.InvalidStateError` and nothing is stored.
        """
        ...

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float = 0.0,
        mode: Mode | None = None,
    ) -> tuple[Rollout, Attempt] | None:
        """Start a new attempt on the oldest queued rollout, atomically.

        Two callers never get the same attempt. Waits up to ``timeout`` seconds for work to arrive
        (woken by events, not polling) and returns None if none did. Expired leases are reaped first,
        so a dead worker's rollout is retried here.
        """
        ...

    async def heartbeat(
        self, rollout_id: str, attempt_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Attempt:
        """Extend the attempt's lease; raises LeaseLostError if it is no longer running."""
        ...

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus,
        *,
        error: str | None = None,
    ) -> Rollout:
        """End an attempt. Success ends the rollout; a failure or timeout requeues it while attempts remain.

        Raises LeaseLostError if the attempt had already ended (for example its lease expired).
        """
        ...

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        """Cancel rollouts that have not finished; their running attempts are cancelled too."""
        ...

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        """Return the rollouts once all have finished, or as they stand when ``timeout`` passes."""
        ...

    async def get_rollout(self, rollout_id: str) -> Rollout: ...

    async def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        group_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Rollout]:
        """Rollouts in the order they were enqueued."""
        ...

    async def update_metadata(self, rollout_id: str, metadata: Mapping[str, JsonValue]) -> Rollout:
        """Merge ``metadata`` into the rollout's (a key given replaces the stored value; the others stay) and
        return the rollout.

        For what is learned about a rollout after it was queued or recorded, such as the traces an imported
        session gathers as they arrive. Nothing else about a rollout changes this way.
        """
        ...

    async def list_summaries(
        self, where: SummaryFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> SummaryPage:
        """Rollout summaries (see :mod:`relight.summaries`) that pass ``where``, one page of them.

        Newest enqueued first; with ``where.changed_after``, in the order they changed. Kept by the
        store as it writes, so this never reads spans.
        """
        ...

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """A rollout's attempts, first to last."""
        ...

    async def add_spans(self, spans: Sequence[Span]) -> None:
        """Store spans; each gets its ``sequence_id`` here. A span already stored is ignored."""
        ...

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        """A rollout's spans (one attempt's when given) by ``sequence_id``."""
        ...

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        """Store a new resources version, one above the latest (the first is 0)."""
        ...

    async def get_resources(self, version: int | None = None) -> Resources:
        """A resources version, the latest when ``version`` is None."""
        ...

    async def stats(self) -> StoreStats: ...

    async def close(self) -> None:
        """Flush pending writes and release connections; safe to call twice."""
        ...
