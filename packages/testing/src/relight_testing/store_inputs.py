"""The store conformance kit's boundary half: values a store must refuse rather than silently change.

Part of :class:`relight_testing.store.StoreConformance` (which every backend subclasses), kept apart
because it is one concern: every input is validated where it enters the store, with an error naming
the field (``ConfigError`` for a bad value, ``NotFoundError`` for an unknown id, ``InvalidStateError``
for a conflict), and a refused call stores nothing. Also the helpers both halves use.
"""

from __future__ import annotations

import math

import pytest

from relight.errors import ConfigError, InvalidStateError, NotFoundError
from relight.records import Attempt, AttemptStatus, Rollout, RolloutRequest, Span, SpanKind
from relight.semconv import REWARD, SPAN_KIND
from relight.store import Store

__all__ = ["StoreInputConformance", "claimed", "make_span", "queued"]


def make_span(
    rollout_id: str,
    attempt_id: str,
    span_id: str,
    *,
    name: str = "step",
    start_time: int = 1_000,
    attributes: dict[str, object] | None = None,
) -> Span:
    """A valid span for tests; ``attributes`` are validated as JSON values."""
    return Span.model_validate(
        {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "span_id": span_id,
            "trace_id": "0" * 31 + "1",
            "name": name,
            "start_time": start_time,
            "end_time": start_time + 500,
            "attributes": attributes or {},
        }
    )


async def queued(store: Store, count: int = 1, /, **fields: object) -> list[Rollout]:
    """``count`` new queued rollouts (inputs ``{"task": i}``) with the given request fields."""
    requests = [RolloutRequest.model_validate({"input": {"task": i}, **fields}) for i in range(count)]
    return await store.enqueue(requests)


async def claimed(store: Store, worker: str = "w1", lease_seconds: float = 30.0, **fields: object) -> Attempt:
    """The running attempt of a rollout queued and claimed for it."""
    await queued(store, **fields)
    claim = await store.claim(worker, lease_seconds=lease_seconds)
    assert claim is not None
    return claim[1]


@pytest.mark.asyncio
class StoreInputConformance:
    """Inputs every store backend refuses, naming the field, without storing any part of the call."""

    async def test_non_finite_numbers_are_refused_naming_where(self, store: Store) -> None:
        with pytest.raises(ConfigError, match=r"input\.x\[1\]"):
            await store.enqueue([RolloutRequest(input={"x": [1, math.nan]})])
        with pytest.raises(ConfigError, match=r"metadata\.weight"):
            await store.enqueue([RolloutRequest(input="ok"), RolloutRequest(input="t", metadata={"weight": math.inf})])
        with pytest.raises(ConfigError, match=r"items\.lr"):
            await store.publish_resources({"lr": -math.inf})
        attempt = await claimed(store)
        reward = make_span(
            attempt.rollout_id,
            attempt.attempt_id,
            "r",
            attributes={SPAN_KIND: SpanKind.REWARD.value, REWARD: math.nan},
        )
        with pytest.raises(ConfigError, match=REWARD):
            await store.add_spans([make_span(attempt.rollout_id, attempt.attempt_id, "ok"), reward])
        stats = await store.stats()
        assert (sum(stats.rollouts_by_status.values()), stats.spans, stats.resources_versions) == (1, 0, 0)

    async def test_spans_of_an_unknown_attempt_are_refused_whole(self, store: Store) -> None:
        (never_claimed,) = await queued(store)
        with pytest.raises(NotFoundError, match="a1"):
            await store.add_spans([make_span(never_claimed.rollout_id, "a1", "s-1")])
        attempt = await claimed(store)
        batch = [
            make_span(attempt.rollout_id, attempt.attempt_id, "s-1"),
            make_span(attempt.rollout_id, "no-such-attempt", "s-2"),
        ]
        with pytest.raises(NotFoundError, match="no-such-attempt"):
            await store.add_spans(batch)
        assert await store.query_spans(attempt.rollout_id) == []
        assert await store.query_spans(never_claimed.rollout_id) == []

    async def test_a_span_id_repeated_with_other_content_is_refused(self, store: Store) -> None:
        attempt = await claimed(store)
        rid, aid = attempt.rollout_id, attempt.attempt_id
        await store.add_spans([make_span(rid, aid, "s-1")])
        with pytest.raises(InvalidStateError, match="s-1"):
            await store.add_spans([make_span(rid, aid, "s-2"), make_span(rid, aid, "s-1", name="other")])
        with pytest.raises(InvalidStateError, match="s-3"):
            await store.add_spans([make_span(rid, aid, "s-3"), make_span(rid, aid, "s-3", start_time=7)])
        assert [(s.span_id, s.name) for s in await store.query_spans(rid)] == [("s-1", "step")]

    async def test_integers_beyond_64_bits_are_refused(self, store: Store) -> None:
        with pytest.raises(ConfigError, match="limit"):
            await store.list_rollouts(limit=10**30)
        with pytest.raises(ConfigError, match="offset"):
            await store.list_rollouts(offset=10**30)
        with pytest.raises(ConfigError, match="offset"):
            await store.list_rollouts(offset=-1)
        with pytest.raises(ConfigError, match="version"):
            await store.get_resources(10**30)

    async def test_leases_are_bounded(self, store: Store) -> None:
        await queued(store)
        for bad in (1e308, math.inf, math.nan, 0.0, -1.0):
            with pytest.raises(ConfigError, match="lease_seconds"):
                await store.claim("w", lease_seconds=bad)
        attempt = await claimed(store)
        with pytest.raises(ConfigError, match="lease_seconds"):
            await store.heartbeat(attempt.rollout_id, attempt.attempt_id, lease_seconds=1e308)

    async def test_a_worker_may_not_give_the_stores_own_statuses(self, store: Store) -> None:
        attempt = await claimed(store)
        for status in (AttemptStatus.EXPIRED, AttemptStatus.RUNNING):
            with pytest.raises(ConfigError, match="status"):
                await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, status)
        (still,) = await store.list_attempts(attempt.rollout_id)
        assert still.status is AttemptStatus.RUNNING
