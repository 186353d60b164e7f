"""The store conformance kit's half on recorded rollouts: work that ran elsewhere, stored beside the queue.

Part of :class:`relight_testing.store.StoreConformance` (which every backend subclasses). A store
records rollouts (:meth:`relight.store.Store.record_rollouts`) running, each with its one attempt
started by the recording worker and no queue entry, so importing work never takes a runner's: a
claim still gets exactly the queued rollouts, in their order. A recorded rollout is never retried,
and a call is all or nothing: an id already taken refuses it whole.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from relight.errors import ConfigError, InvalidStateError, LeaseLostError, NotFoundError
from relight.records import AttemptStatus, Mode, RolloutRequest, RolloutStatus
from relight.store import Store
from relight.summaries import SummaryFilter
from relight_testing.clock import ManualClock
from relight_testing.store_inputs import make_span, queued

__all__ = ["RecordConformance"]

_SETTLE = 10.0
"""How long a test waits for something that should happen at once; reached only when broken."""


def _requests(*ids: str, **fields: object) -> list[RolloutRequest]:
    return [
        RolloutRequest.model_validate({"input": {"trace": rollout_id}, "rollout_id": rollout_id, **fields})
        for rollout_id in ids
    ]


@pytest.mark.asyncio
class RecordConformance:
    """How every store backend records rollouts that ran elsewhere. Subclasses provide ``store`` and ``clock``."""

    async def test_recorded_rollouts_are_running_and_never_queued(self, store: Store, clock: ManualClock) -> None:
        now = clock()
        recorded = await store.record_rollouts(
            [
                RolloutRequest(input={"trace": "t1"}, rollout_id="ro-t1", metadata={"source": "otlp"}, group_id="g"),
                RolloutRequest(input={"trace": "t2"}, mode=Mode.VAL),
            ],
            worker_id="importer",
            lease_seconds=12.5,
        )
        (first, first_attempt), (second, second_attempt) = recorded
        assert (first.rollout_id, first.group_id, first.metadata) == ("ro-t1", "g", {"source": "otlp"})
        assert second.rollout_id != first.rollout_id
        assert second.group_id == second.rollout_id
        assert second.mode is Mode.VAL
        for rollout, attempt in recorded:
            assert (rollout.status, rollout.attempt_count, rollout.max_attempts) == (RolloutStatus.RUNNING, 1, 1)
            assert rollout.created_at == now
            assert (attempt.rollout_id, attempt.number, attempt.worker_id) == (rollout.rollout_id, 1, "importer")
            assert attempt.status is AttemptStatus.RUNNING
            assert (attempt.started_at, attempt.lease_expires_at) == (now, now + 12.5)
            assert await store.get_rollout(rollout.rollout_id) == rollout
            assert await store.list_attempts(rollout.rollout_id) == [attempt]
        assert first_attempt.attempt_id != second_attempt.attempt_id
        assert await store.list_rollouts() == [first, second]
        assert await store.list_rollouts(status=RolloutStatus.QUEUED) == []
        assert await store.claim("runner") is None
        assert await store.claim("runner", mode=Mode.VAL) is None
        stats = await store.stats()
        assert (stats.rollouts_by_status, stats.attempts_by_status) == ({"running": 2}, {"running": 2})

    async def test_a_recorded_attempt_is_ended_as_a_claimed_one(self, store: Store) -> None:
        ((rollout, attempt),) = await store.record_rollouts(_requests("ro-r"), worker_id="importer")
        rid, aid = rollout.rollout_id, attempt.attempt_id
        await store.add_spans([make_span(rid, aid, "s-1"), make_span(rid, aid, "s-2")])
        beat = await store.heartbeat(rid, aid, lease_seconds=60)
        assert beat.status is AttemptStatus.RUNNING
        finished = await store.finish_attempt(rid, aid, AttemptStatus.SUCCEEDED)
        assert finished.status is RolloutStatus.SUCCEEDED
        assert [span.span_id for span in await store.query_spans(rid, aid)] == ["s-1", "s-2"]
        (summary,) = (await store.list_summaries(SummaryFilter(statuses=[RolloutStatus.SUCCEEDED]))).rows
        assert (summary.rollout, summary.spans) == (finished, 2)
        with pytest.raises(LeaseLostError):
            await store.finish_attempt(rid, aid, AttemptStatus.SUCCEEDED)
        assert await store.claim("runner") is None

    async def test_recording_beside_queued_work_leaves_that_work_to_runners(self, store: Store) -> None:
        waiting = asyncio.create_task(store.claim("runner", timeout=_SETTLE))
        work = await queued(store, 2)
        claimed = await asyncio.wait_for(waiting, _SETTLE)
        assert claimed is not None
        later = await queued(store, 1)
        ((imported, attempt),) = await store.record_rollouts(_requests("ro-imported"), worker_id="importer")
        assert (await store.list_rollouts(status=RolloutStatus.QUEUED)) == [*work[1:], *later]
        order: list[str] = [claimed[0].rollout_id]
        while (next_claim := await store.claim("runner")) is not None:
            assert next_claim[1].worker_id == "runner"
            order.append(next_claim[0].rollout_id)
        assert order == [rollout.rollout_id for rollout in (*work, *later)]
        assert await store.list_attempts(imported.rollout_id) == [attempt]
        assert (await store.get_rollout(imported.rollout_id)).status is RolloutStatus.RUNNING

    async def test_a_taken_rollout_id_refuses_the_whole_call(self, store: Store) -> None:
        (taken,) = await store.enqueue(_requests("ro-taken"))
        await store.record_rollouts(_requests("ro-recorded"), worker_id="importer")
        calls = {
            "ro-taken": _requests("ro-new", "ro-taken"),
            "ro-recorded": _requests("ro-new", "ro-recorded"),
            "ro-twice": _requests("ro-new", "ro-twice", "ro-twice"),
        }
        for conflict, requests in calls.items():
            with pytest.raises(InvalidStateError, match=conflict):
                await store.record_rollouts(requests, worker_id="importer")
        with pytest.raises(NotFoundError, match="ro-new"):
            await store.get_rollout("ro-new")
        with pytest.raises(NotFoundError, match="ro-twice"):
            await store.get_rollout("ro-twice")
        assert await store.get_rollout("ro-taken") == taken
        assert [r.rollout_id for r in await store.list_rollouts()] == ["ro-taken", "ro-recorded"]
        claimed = await store.claim("runner")
        assert claimed is not None
        assert claimed[0].rollout_id == "ro-taken"

    async def test_a_recorded_rollout_whose_lease_runs_out_fails_and_is_not_queued(
        self, store: Store, clock: ManualClock
    ) -> None:
        ((rollout, attempt),) = await store.record_rollouts(
            _requests("ro-lost", max_attempts=3), worker_id="importer", lease_seconds=5
        )
        assert rollout.max_attempts == 1
        clock.advance(6)
        assert await store.claim("runner") is None
        (failed,) = await store.wait([rollout.rollout_id], timeout=_SETTLE)
        assert failed.status is RolloutStatus.FAILED
        assert failed.error is not None
        assert "importer" in failed.error
        (expired,) = await store.list_attempts(rollout.rollout_id)
        assert (expired.attempt_id, expired.status) == (attempt.attempt_id, AttemptStatus.EXPIRED)

    async def test_waiting_on_a_recorded_rollout_wakes_when_it_ends(self, store: Store) -> None:
        ((rollout, attempt),) = await store.record_rollouts(_requests("ro-w"), worker_id="importer")
        waiting = asyncio.create_task(store.wait([rollout.rollout_id], timeout=_SETTLE))
        done, _ = await asyncio.wait({waiting}, timeout=0.1)
        assert not done
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.FAILED, error="judge said no")
        (ended,) = await asyncio.wait_for(waiting, _SETTLE)
        assert (ended.status, ended.error) == (RolloutStatus.FAILED, "judge said no")

    async def test_recording_refuses_bad_input_naming_it(self, store: Store) -> None:
        assert await store.record_rollouts([], worker_id="importer") == []
        with pytest.raises(ConfigError, match="worker_id"):
            await store.record_rollouts(_requests("ro-a"), worker_id="")
        for lease in (0.0, -1.0, math.inf, math.nan):
            with pytest.raises(ConfigError, match="lease_seconds"):
                await store.record_rollouts(_requests("ro-a"), worker_id="importer", lease_seconds=lease)
        with pytest.raises(ConfigError, match=r"metadata\.weight"):
            await store.record_rollouts(
                [*_requests("ro-a"), RolloutRequest(input="t", metadata={"weight": math.nan})], worker_id="importer"
            )
        assert await store.list_rollouts() == []
        stats = await store.stats()
        assert (stats.rollouts_by_status, stats.attempts_by_status) == ({}, {})

    async def test_metadata_learned_later_is_merged_into_the_rollout(self, store: Store) -> None:
        ((rollout, attempt),) = await store.record_rollouts(
            _requests("ro-m", metadata={"source": "otlp", "trace_ids": ["t1"]}), worker_id="importer"
        )
        (other,) = await store.enqueue(_requests("ro-q", metadata={"step": 3}))
        seen = (await store.list_summaries(limit=1)).changed
        updated = await store.update_metadata(rollout.rollout_id, {"trace_ids": ["t1", "t2"], "note": None})
        assert updated.metadata == {"source": "otlp", "trace_ids": ["t1", "t2"], "note": None}
        assert updated.model_dump(exclude={"metadata"}) == rollout.model_dump(exclude={"metadata"})
        assert await store.get_rollout(rollout.rollout_id) == updated
        assert await store.get_rollout(other.rollout_id) == other
        (summary,) = (await store.list_summaries(SummaryFilter(changed_after=seen))).rows
        assert summary.rollout == updated
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
        finished = await store.update_metadata(rollout.rollout_id, {"trace_ids": ["t1", "t2", "t3"]})
        assert (finished.status, finished.metadata["trace_ids"]) == (RolloutStatus.SUCCEEDED, ["t1", "t2", "t3"])

    async def test_metadata_of_an_unknown_rollout_or_not_json_is_refused(self, store: Store) -> None:
        with pytest.raises(NotFoundError):
            await store.update_metadata("no-such-rollout", {"a": 1})
        ((rollout, _),) = await store.record_rollouts(_requests("ro-n", metadata={"a": 1}), worker_id="importer")
        with pytest.raises(ConfigError, match=r"metadata\.b"):
            await store.update_metadata(rollout.rollout_id, {"b": math.inf})
        assert (await store.get_rollout(rollout.rollout_id)).metadata == {"a": 1}
