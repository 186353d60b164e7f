"""SpanBatcher: any thread submits without waiting; one task writes what gathered, in batches."""

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relight.records import AttemptStatus, RolloutRequest
from relight.stores.sqlite import SqliteStore
from relight.tracing.batcher import SpanBatcher, SpansLostError
from relight_testing.store import SETTLE, make_span


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "store.db")
    await store.enqueue([RolloutRequest(input=None, rollout_id="r", max_attempts=8)])
    for _ in range(8):  # attempts r-a1 … r-a8: the store takes spans of attempts it started
        claimed = await store.claim("w")
        assert claimed is not None
        await store.finish_attempt("r", claimed[1].attempt_id, AttemptStatus.FAILED)
    yield store
    await store.close()


async def test_spans_from_many_threads_arrive_in_few_writes(store: SqliteStore) -> None:
    before = (await store.stats()).extra["writes_since_open"]
    batcher = SpanBatcher(store)

    def agent(thread: int) -> None:
        for i in range(500):
            batcher.submit(make_span("r", f"r-a{thread + 1}", f"s-{i}"))

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    await asyncio.to_thread(lambda: [thread.join() for thread in threads])
    await batcher.aclose()
    stats = await store.stats()
    assert (batcher.written, batcher.failed, stats.spans) == (4000, 0, 4000)
    assert stats.extra["writes_since_open"] - before < 4000 / 10


async def test_batches_are_at_most_max_batch(store: SqliteStore) -> None:
    before = (await store.stats()).extra["writes_since_open"]
    batcher = SpanBatcher(store, max_batch=100)
    batcher.submit_many([make_span("r", "r-a1", f"s-{i}") for i in range(1000)])
    await batcher.aclose()
    stats = await store.stats()
    assert stats.spans == 1000
    assert stats.extra["writes_since_open"] == before + 10


async def test_submit_never_waits_for_a_blocked_store(store: SqliteStore) -> None:
    batcher = SpanBatcher(store)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the store cannot commit until this ends
    batcher.submit(make_span("r", "r-a1", "s-first"))
    submitted = await asyncio.to_thread(lambda: [batcher.submit(make_span("r", "r-a1", f"s-{i}")) for i in range(200)])
    assert len(submitted) == 200
    assert (await store.stats()).spans == 0
    blocker.rollback()
    blocker.close()
    await asyncio.wait_for(batcher.flush(), SETTLE)
    assert (await store.stats()).spans == 201
    await batcher.aclose()


async def test_after_close_spans_are_dropped_and_counted(store: SqliteStore, caplog: pytest.LogCaptureFixture) -> None:
    batcher = SpanBatcher(store)
    batcher.submit(make_span("r", "r-a1", "s-1"))
    await batcher.aclose()
    await batcher.aclose()
    batcher.submit(make_span("r", "r-a1", "s-2"))
    assert (batcher.written, batcher.failed) == (1, 1)
    assert "after the batcher closed" in caplog.text


def test_a_closed_event_loop_does_not_raise_into_the_caller(tmp_path: Path) -> None:
    async def batcher_on_a_loop_about_to_end() -> SpanBatcher:
        store = SqliteStore(tmp_path / "store.db")
        await store.close()
        return SpanBatcher(store)

    batcher = asyncio.run(batcher_on_a_loop_about_to_end())
    batcher.submit(make_span("r", "r-a1", "s-1"))
    assert batcher.failed == 1


async def test_an_attempt_whose_spans_failed_to_be_written_is_told_once(store: SqliteStore) -> None:
    batcher = SpanBatcher(store)
    batcher.submit_many([make_span("r", "r-a1", "s-1"), make_span("r", "r-a2", "s-1")])
    batcher.submit(make_span("r", "r-a2", "s-1", name="conflicting"))  # refused by the store: 409
    with pytest.raises(SpansLostError, match="2 span"):  # its whole batch: the store refuses a batch whole
        await batcher.flush_attempt("r", "r-a2")
    await batcher.flush_attempt("r", "r-a2")  # told once: the attempt was failed by whoever asked
    await batcher.flush_attempt("r", "r-a1")
    assert (batcher.written, batcher.failed) == (1, 2)
    await batcher.aclose()
