"""The store conformance kit: one base test class every :class:`relight.store.Store` backend passes.

A backend proves itself with one subclass that says how to make a fresh, empty store on a given
clock (pytest-asyncio in auto mode runs the async tests)::

    from relight_testing.clock import ManualClock
    from relight_testing.store import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Store]:
            store = MyStore(tmp_path / "store", clock=clock)
            yield store
            await store.close()

Leases run on the injected :class:`~relight_testing.clock.ManualClock`, so expiry is tested by moving the clock rather
than by waiting; ``timeout`` arguments run on real time and are kept short.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from relight.errors import ConfigError, InvalidStateError, LeaseLostError, NotFoundError, StoreError
from relight.records import (
    AttemptStatus,
    Mode,
    RolloutRequest,
    RolloutStatus,
    SpanKind,
)
from relight.semconv import REWARD, SPAN_KIND
from relight.store import Store
from relight_testing.clock import ManualClock
from relight_testing.store_inputs import StoreInputConformance, make_span
from relight_testing.store_inputs import claimed as _claimed
from relight_testing.store_inputs import queued as _queued
from relight_testing.store_records import RecordConformance
from relight_testing.store_summaries import SummaryConformance

__all__ = ["StoreConformance", "make_span"]

SETTLE = 10.0
"""How long a test waits for something that should happen at once; reached only when broken."""
STILL_WAITING = 0.1
"""How long a test lets a waiter run to show that it keeps waiting when it should."""


async def _still_waiting(task: asyncio.Task[object]) -> bool:
    done, _ = await asyncio.wait({task}, timeout=STILL_WAITING)
    return not done


@pytest.mark.asyncio
class StoreConformance(StoreInputConformance, SummaryConformance, RecordConformance):
    """Behaviour every store backend must show. Subclasses provide the ``store`` fixture."""

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    # -- enqueue --------------------------------------------------------------------------------

    async def test_enqueue_makes_queued_rollouts_in_order(self, store: Store, clock: ManualClock) -> None:
        rollouts = await store.enqueue(
            [
                RolloutRequest(input={"question": "2+2"}, metadata={"source": "gsm"}),
                RolloutRequest(input="second", mode=Mode.VAL, group_id="task-7", max_attempts=5),
            ]
        )
        first, second = rollouts
        assert first.status is RolloutStatus.QUEUED
        assert first.input == {"question": "2+2"}
        assert first.metadata == {"source": "gsm"}
        assert first.mode is Mode.TRAIN
        assert first.group_id == first.rollout_id
        assert first.created_at == clock()
        assert first.attempt_count == 0
        assert (second.mode, second.group_id, second.max_attempts) == (Mode.VAL, "task-7", 5)
        assert first.rollout_id != second.rollout_id
        assert await store.list_rollouts() == rollouts
        assert await store.get_rollout(second.rollout_id) == second

    async def test_enqueue_nothing(self, store: Store) -> None:
        assert await store.enqueue([]) == []

    async def test_enqueue_is_idempotent_by_rollout_id(self, store: Store) -> None:
        (original,) = await store.enqueue([RolloutRequest(input="first", rollout_id="ro-fixed")])
        again = await store.enqueue(
            [RolloutRequest(input="changed", rollout_id="ro-fixed"), RolloutRequest(input="x", rollout_id="ro-fixed")]
        )
        assert again == [original, original]
        assert await store.list_rollouts() == [original]

    async def test_list_rollouts_filters_and_pages(self, store: Store) -> None:
        train = await _queued(store, 3, group_id="g1")
        val = await _queued(store, 2, mode="val", group_id="g2")
        claimed = await store.claim("w1")
        assert claimed is not None
        running = await store.get_rollout(train[0].rollout_id)
        assert await store.list_rollouts(mode=Mode.VAL) == val
        assert await store.list_rollouts(group_id="g1") == [running, *train[1:]]
        assert await store.list_rollouts(status=RolloutStatus.RUNNING) == [running]
        assert await store.list_rollouts(limit=2, offset=1) == train[1:3]
        assert await store.list_rollouts(offset=4) == val[1:]
        assert await store.list_rollouts(limit=0) == []
        with pytest.raises(ConfigError, match="limit"):
            await store.list_rollouts(limit=-1)

    async def test_unknown_rollout_is_not_found(self, store: Store) -> None:
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.get_rollout("ro-missing"),
            lambda: store.list_attempts("ro-missing"),
            lambda: store.query_spans("ro-missing"),
            lambda: store.wait(["ro-missing"], timeout=0),
            lambda: store.cancel(["ro-missing"]),
            lambda: store.heartbeat("ro-missing", "ro-missing-a1"),
            lambda: store.finish_attempt("ro-missing", "ro-missing-a1", AttemptStatus.SUCCEEDED),
        ]
        for call in calls:
            with pytest.raises(NotFoundError, match="ro-missing"):
                await call()

    # -- claim ----------------------------------------------------------------------------------

    async def test_claim_starts_an_attempt_on_the_oldest_queued_rollout(self, store: Store, clock: ManualClock) -> None:
        first, _ = await _queued(store, 2)
        claimed = await store.claim("worker-1", lease_seconds=12.5)
        assert claimed is not None
        rollout, attempt = claimed
        assert rollout.rollout_id == first.rollout_id
        assert rollout.status is RolloutStatus.RUNNING
        assert rollout.attempt_count == 1
        assert (attempt.rollout_id, attempt.number, attempt.worker_id) == (first.rollout_id, 1, "worker-1")
        assert attempt.status is AttemptStatus.RUNNING
        assert attempt.started_at == clock()
        assert attempt.lease_expires_at == clock() + 12.5
        assert await store.get_rollout(first.rollout_id) == rollout
        assert await store.list_attempts(first.rollout_id) == [attempt]

    async def test_claim_returns_none_without_work(self, store: Store) -> None:
        assert await store.claim("w1") is None
        assert await store.claim("w1", timeout=STILL_WAITING) is None

    async def test_claim_filters_by_mode(self, store: Store) -> None:
        (train,) = await _queued(store, mode="train")
        (val,) = await _queued(store, mode="val")
        claimed = await store.claim("w1", mode=Mode.VAL)
        assert claimed is not None
        assert claimed[0].rollout_id == val.rollout_id
        assert await store.claim("w1", mode=Mode.VAL) is None
        claimed = await store.claim("w1")
        assert claimed is not None
        assert claimed[0].rollout_id == train.rollout_id

    async def test_claim_rejects_a_bad_lease(self, store: Store) -> None:
        await _queued(store)
        for lease in (0.0, -1.0, float("inf")):
            with pytest.raises(ConfigError, match="lease_seconds"):
                await store.claim("w1", lease_seconds=lease)

    async def test_waiting_claim_wakes_when_work_arrives(self, store: Store) -> None:
        waiting = asyncio.create_task(store.claim("w1", timeout=SETTLE))
        assert await _still_waiting(waiting)
        (rollout,) = await _queued(store)
        claimed = await asyncio.wait_for(waiting, SETTLE)
        assert claimed is not None
        assert claimed[0].rollout_id == rollout.rollout_id

    async def test_concurrent_claims_never_share_a_rollout(self, store: Store) -> None:
        rollouts = await _queued(store, 12)
        results = await asyncio.gather(*(store.claim(f"w{i}") for i in range(30)))
        claimed = [result for result in results if result is not None]
        assert sorted(r.rollout_id for r, _ in claimed) == sorted(r.rollout_id for r in rollouts)
        assert len({a.attempt_id for _, a in claimed}) == 12

    async def test_concurrent_waiting_claims_each_get_one_rollout(self, store: Store) -> None:
        waiting = [asyncio.create_task(store.claim(f"w{i}", timeout=SETTLE)) for i in range(4)]
        assert await _still_waiting(waiting[0])
        rollouts = await _queued(store, 4)
        results = await asyncio.wait_for(asyncio.gather(*waiting), SETTLE)
        assert sorted(r.rollout_id for r, _ in filter(None, results)) == sorted(r.rollout_id for r in rollouts)

    # -- heartbeats and leases ------------------------------------------------------------------

    async def test_heartbeat_extends_the_lease(self, store: Store, clock: ManualClock) -> None:
        attempt = await _claimed(store, lease_seconds=10)
        clock.advance(8)
        beat = await store.heartbeat(attempt.rollout_id, attempt.attempt_id, lease_seconds=10)
        assert beat.lease_expires_at == clock() + 10
        clock.advance(8)
        assert await store.claim("w2") is None
        assert (await store.list_attempts(attempt.rollout_id))[0].status is AttemptStatus.RUNNING

    async def test_expired_lease_is_retried_and_the_old_worker_is_told(self, store: Store, clock: ManualClock) -> None:
        first = await _claimed(store, "w1", lease_seconds=10)
        clock.advance(10.5)
        claimed = await store.claim("w2")
        assert claimed is not None
        rollout, second = claimed
        assert (rollout.rollout_id, rollout.attempt_count, second.number) == (first.rollout_id, 2, 2)
        expired = (await store.list_attempts(first.rollout_id))[0]
        assert expired.status is AttemptStatus.EXPIRED
        assert expired.error is not None
        assert "w1" in expired.error
        with pytest.raises(LeaseLostError, match=first.attempt_id):
            await store.heartbeat(first.rollout_id, first.attempt_id)
        with pytest.raises(LeaseLostError):
            await store.finish_attempt(first.rollout_id, first.attempt_id, AttemptStatus.SUCCEEDED)
        assert (await store.get_rollout(first.rollout_id)).status is RolloutStatus.RUNNING

    async def test_expiry_on_the_last_attempt_fails_the_rollout(self, store: Store, clock: ManualClock) -> None:
        attempt = await _claimed(store, lease_seconds=5, max_attempts=1)
        clock.advance(6)
        (rollout,) = await store.wait([attempt.rollout_id], timeout=SETTLE)
        assert rollout.status is RolloutStatus.FAILED
        assert rollout.error is not None
        assert "lease expired" in rollout.error
        assert await store.claim("w2") is None

    # -- finishing attempts ---------------------------------------------------------------------

    async def test_success_ends_the_rollout(self, store: Store, clock: ManualClock) -> None:
        attempt = await _claimed(store)
        clock.advance(3)
        rollout = await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
        assert rollout.status is RolloutStatus.SUCCEEDED
        assert rollout.finished_at == clock()
        assert rollout.error is None
        (ended,) = await store.list_attempts(attempt.rollout_id)
        assert (ended.status, ended.finished_at) == (AttemptStatus.SUCCEEDED, clock())
        assert await store.get_rollout(attempt.rollout_id) == rollout
        with pytest.raises(LeaseLostError, match="succeeded"):
            await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
        with pytest.raises(LeaseLostError):
            await store.heartbeat(attempt.rollout_id, attempt.attempt_id)

    async def test_failures_are_retried_up_to_max_attempts(self, store: Store) -> None:
        (queued,) = await _queued(store, max_attempts=3)
        for number, status in enumerate((AttemptStatus.FAILED, AttemptStatus.TIMED_OUT, AttemptStatus.FAILED), 1):
            claimed = await store.claim(f"w{number}")
            assert claimed is not None
            rollout, attempt = claimed
            assert (rollout.rollout_id, attempt.number) == (queued.rollout_id, number)
            rollout = await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, status, error=f"boom {number}")
            assert rollout.error == f"boom {number}"
            assert rollout.status is (RolloutStatus.QUEUED if number < 3 else RolloutStatus.FAILED)
        assert await store.claim("w4") is None
        attempts = await store.list_attempts(queued.rollout_id)
        assert [a.status for a in attempts] == [AttemptStatus.FAILED, AttemptStatus.TIMED_OUT, AttemptStatus.FAILED]
        assert [a.error for a in attempts] == ["boom 1", "boom 2", "boom 3"]

    async def test_a_retried_rollout_goes_behind_the_queue(self, store: Store) -> None:
        first, second = await _queued(store, 2)
        claimed = await store.claim("w1")
        assert claimed is not None
        await store.finish_attempt(first.rollout_id, claimed[1].attempt_id, AttemptStatus.FAILED)
        order: list[str] = []
        while (claimed := await store.claim("w1")) is not None:
            order.append(claimed[0].rollout_id)
        assert order == [second.rollout_id, first.rollout_id]

    async def test_cancelled_attempt_cancels_the_rollout(self, store: Store) -> None:
        attempt = await _claimed(store, max_attempts=3)
        rollout = await store.finish_attempt(
            attempt.rollout_id, attempt.attempt_id, AttemptStatus.CANCELLED, error="user stopped it"
        )
        assert rollout.status is RolloutStatus.CANCELLED
        assert await store.claim("w2") is None

    async def test_finish_refuses_running_and_unknown_attempts(self, store: Store) -> None:
        attempt = await _claimed(store)
        with pytest.raises(ConfigError, match="running"):
            await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.RUNNING)
        with pytest.raises(NotFoundError, match="nope"):
            await store.finish_attempt(attempt.rollout_id, "nope", AttemptStatus.SUCCEEDED)
        await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.FAILED)
        with pytest.raises(InvalidStateError):
            await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.FAILED)

    # -- cancel ---------------------------------------------------------------------------------

    async def test_cancel_queued_running_and_finished_rollouts(self, store: Store, clock: ManualClock) -> None:
        done = await _claimed(store)
        await store.finish_attempt(done.rollout_id, done.attempt_id, AttemptStatus.SUCCEEDED)
        running = await _claimed(store)
        (queued,) = await _queued(store)
        clock.advance(1)
        result = await store.cancel([running.rollout_id, queued.rollout_id, done.rollout_id])
        assert [r.status for r in result] == [RolloutStatus.CANCELLED, RolloutStatus.CANCELLED, RolloutStatus.SUCCEEDED]
        assert result[0].finished_at == clock()
        (attempt,) = await store.list_attempts(running.rollout_id)
        assert attempt.status is AttemptStatus.CANCELLED
        with pytest.raises(LeaseLostError):
            await store.heartbeat(running.rollout_id, running.attempt_id)
        assert await store.claim("w2") is None

    async def test_cancel_with_an_unknown_id_changes_nothing(self, store: Store) -> None:
        (queued,) = await _queued(store)
        with pytest.raises(NotFoundError, match="ro-missing"):
            await store.cancel([queued.rollout_id, "ro-missing"])
        assert (await store.get_rollout(queued.rollout_id)).status is RolloutStatus.QUEUED

    # -- wait -----------------------------------------------------------------------------------

    async def test_wait_returns_once_all_have_finished(self, store: Store) -> None:
        rollouts = await _queued(store, 2)
        ids = [r.rollout_id for r in rollouts]
        waiting = asyncio.create_task(store.wait(ids, timeout=SETTLE))
        for _ in ids:
            claimed = await store.claim("w1")
            assert claimed is not None
            assert await _still_waiting(waiting)
            await store.finish_attempt(claimed[0].rollout_id, claimed[1].attempt_id, AttemptStatus.SUCCEEDED)
        finished = await asyncio.wait_for(waiting, SETTLE)
        assert [r.rollout_id for r in finished] == ids
        assert all(r.status is RolloutStatus.SUCCEEDED for r in finished)

    async def test_wait_gives_the_current_state_when_it_times_out(self, store: Store) -> None:
        (queued,) = await _queued(store)
        assert await store.wait([queued.rollout_id], timeout=STILL_WAITING) == [queued]
        assert await store.wait([], timeout=0) == []

    async def test_wait_wakes_on_cancel(self, store: Store) -> None:
        (queued,) = await _queued(store)
        waiting = asyncio.create_task(store.wait([queued.rollout_id]))
        assert await _still_waiting(waiting)
        await store.cancel([queued.rollout_id])
        (rollout,) = await asyncio.wait_for(waiting, SETTLE)
        assert rollout.status is RolloutStatus.CANCELLED

    # -- spans ----------------------------------------------------------------------------------

    async def test_spans_single_and_batched_keep_arrival_order(self, store: Store) -> None:
        attempt = await _claimed(store)
        rid, aid = attempt.rollout_id, attempt.attempt_id
        await store.add_spans([make_span(rid, aid, "s-b", start_time=50)])
        await store.add_spans([make_span(rid, aid, f"s-{i}", start_time=10 - i) for i in range(5)])
        await store.add_spans([make_span(rid, aid, "s-a", start_time=1)])
        spans = await store.query_spans(rid)
        assert [s.span_id for s in spans] == ["s-b", "s-0", "s-1", "s-2", "s-3", "s-4", "s-a"]
        sequence = [s.sequence_id for s in spans if s.sequence_id is not None]
        assert len(sequence) == len(spans)
        assert sequence == sorted(sequence)
        assert len(set(sequence)) == len(sequence)

    async def test_spans_keep_every_field(self, store: Store) -> None:
        attempt = await _claimed(store)
        attributes: dict[str, object] = {
            SPAN_KIND: SpanKind.REWARD.value,
            REWARD: -0.25,
            "relight.prompt_token_ids": [1, 2, 3],
            "nested": {"list": [1, "two", None, True], "text": "héllo ✓"},
            "beyond 64 bits": 2**70,
        }
        sent = make_span(attempt.rollout_id, attempt.attempt_id, "s-1", attributes=attributes).model_copy(
            update={"parent_id": "p-1", "status_code": "ERROR", "status_message": "bad", "sequence_id": 999_999}
        )
        await store.add_spans([sent])
        (stored,) = await store.query_spans(attempt.rollout_id, attempt.attempt_id)
        assert stored.model_dump(exclude={"sequence_id"}) == sent.model_dump(exclude={"sequence_id"})
        assert stored.kind is SpanKind.REWARD

    async def test_a_span_sent_twice_is_stored_once(self, store: Store) -> None:
        attempt = await _claimed(store)
        rid, aid = attempt.rollout_id, attempt.attempt_id
        await store.add_spans([make_span(rid, aid, "s-1"), make_span(rid, aid, "s-1")])
        await store.add_spans([make_span(rid, aid, "s-1"), make_span(rid, aid, "s-2")])  # a retried write
        spans = await store.query_spans(rid)
        assert [(s.span_id, s.name) for s in spans] == [("s-1", "step"), ("s-2", "step")]
        assert (await store.stats()).spans == 2

    async def test_spans_are_queried_by_attempt(self, store: Store, clock: ManualClock) -> None:
        first = await _claimed(store, lease_seconds=5)
        clock.advance(6)
        claimed = await store.claim("w2")
        assert claimed is not None
        second = claimed[1]
        rid = first.rollout_id
        await store.add_spans(
            [
                make_span(rid, first.attempt_id, "s-1"),
                make_span(rid, second.attempt_id, "s-1"),
                make_span(rid, second.attempt_id, "s-2"),
            ]
        )
        assert [s.attempt_id for s in await store.query_spans(rid, first.attempt_id)] == [first.attempt_id]
        assert [s.span_id for s in await store.query_spans(rid, second.attempt_id)] == ["s-1", "s-2"]
        assert len(await store.query_spans(rid)) == 3
        assert await store.query_spans(rid, "no-such-attempt") == []

    async def test_spans_of_an_unknown_rollout_are_refused_whole(self, store: Store) -> None:
        attempt = await _claimed(store)
        batch = [make_span(attempt.rollout_id, attempt.attempt_id, "s-1"), make_span("ro-missing", "a", "s-2")]
        with pytest.raises(NotFoundError, match="ro-missing"):
            await store.add_spans(batch)
        assert await store.query_spans(attempt.rollout_id) == []
        await store.add_spans([])

    # -- resources ------------------------------------------------------------------------------

    async def test_resources_are_versioned(self, store: Store, clock: ManualClock) -> None:
        with pytest.raises(NotFoundError, match="no resources"):
            await store.get_resources()
        first = await store.publish_resources({"model": "tiny", "prompt": "You are {role}."})
        second = await store.publish_resources({"model": "tiny-v1"})
        assert (first.version, second.version) == (0, 1)
        assert first.items == {"model": "tiny", "prompt": "You are {role}."}
        assert first.created_at == clock()
        assert await store.get_resources() == second
        assert await store.get_resources(0) == first
        with pytest.raises(NotFoundError, match="version 2"):
            await store.get_resources(2)

    # -- stats and lifecycle --------------------------------------------------------------------

    async def test_stats_count_what_is_stored(self, store: Store) -> None:
        empty = await store.stats()
        assert (empty.rollouts_by_status, empty.attempts_by_status, empty.spans, empty.resources_versions) == (
            {},
            {},
            0,
            0,
        )
        attempt = await _claimed(store)
        await store.finish_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.FAILED)
        await _claimed(store)
        await _queued(store, 2)
        await store.add_spans([make_span(attempt.rollout_id, attempt.attempt_id, f"s-{i}") for i in range(3)])
        await store.publish_resources({"model": "m"})
        stats = await store.stats()
        assert stats.rollouts_by_status == {"queued": 3, "running": 1}
        assert stats.attempts_by_status == {"failed": 1, "running": 1}
        assert (stats.spans, stats.resources_versions) == (3, 1)

    async def test_closing_the_store_ends_waits(self, store: Store) -> None:
        (queued,) = await _queued(store, mode="train")
        waits: list[asyncio.Task[object]] = [
            asyncio.create_task(store.wait([queued.rollout_id])),
            asyncio.create_task(store.claim("w", timeout=60, mode=Mode.VAL)),
        ]
        assert await _still_waiting(waits[0])
        await store.close()
        for waiting in waits:
            with pytest.raises(StoreError):
                await asyncio.wait_for(waiting, SETTLE)

    async def test_a_closed_store_refuses_calls(self, store: Store) -> None:
        await _queued(store)
        await store.close()
        await store.close()
        with pytest.raises(StoreError, match="closed"):
            await store.list_rollouts()
        with pytest.raises(StoreError, match="closed"):
            await store.enqueue([RolloutRequest(input=None)])
