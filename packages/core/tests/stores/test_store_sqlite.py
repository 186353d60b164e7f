import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relight.errors import ConfigError, NotFoundError, StoreError
from relight.records import AttemptStatus, RolloutRequest
from relight.store import Store
from relight.stores.sqlite import SqliteStore
from relight.summaries import RolloutSummary, SummaryFilter
from relight_testing.clock import ManualClock
from relight_testing.store import StoreConformance, make_span
from relight_testing.store_summaries import check_migrated, fill_varied, summaries_from_spans


class TestSqliteStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Store]:
        store = SqliteStore(tmp_path / "store.db", clock=clock)
        yield store
        await store.close()


async def test_everything_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    first, second, third = await store.enqueue([RolloutRequest(input=i, group_id="g") for i in range(3)])
    claimed = await store.claim("w1")
    assert claimed is not None
    await store.finish_attempt(first.rollout_id, claimed[1].attempt_id, AttemptStatus.FAILED, error="boom")
    await store.add_spans([make_span(first.rollout_id, claimed[1].attempt_id, f"s-{i}") for i in range(3)])
    await store.publish_resources({"model": "m"})
    before = (await store.list_rollouts(), await store.list_attempts(first.rollout_id), await store.stats())
    spans = await store.query_spans(first.rollout_id)
    await store.close()

    reopened = SqliteStore(path)
    try:
        after = (await reopened.list_rollouts(), await reopened.list_attempts(first.rollout_id), await reopened.stats())
        assert after[:2] == before[:2]
        assert after[2].model_dump(exclude={"extra"}) == before[2].model_dump(exclude={"extra"})
        assert await reopened.query_spans(first.rollout_id) == spans
        assert (await reopened.get_resources()).items == {"model": "m"}
        order = [claimed[0].rollout_id for _ in range(3) if (claimed := await reopened.claim("w2")) is not None]
        assert order == [second.rollout_id, third.rollout_id, first.rollout_id]
    finally:
        await reopened.close()


async def _older_file(path: Path, *statements: str) -> list[RolloutSummary]:
    """A varied store at ``path`` as an earlier release left it (``statements`` undo what it lacked); its summaries."""
    store = SqliteStore(path)
    await fill_varied(store)
    expected = await summaries_from_spans(store)
    await store.close()
    with sqlite3.connect(path) as old:
        for statement in statements:
            old.execute(statement)
    return expected


async def test_a_file_made_before_summaries_gets_them_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    expected = await _older_file(path, "DROP TABLE summaries", "DELETE FROM counters WHERE name = 'summaries'")
    await check_migrated(SqliteStore(path), expected)


async def test_a_file_made_before_the_role_table_gets_it_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    expected = await _older_file(path, "DROP TABLE summary_roles")
    reopened = SqliteStore(path)
    try:
        for roles in (["critic"], ["team/writer", "solver"]):
            page = await reopened.list_summaries(SummaryFilter(roles=roles), limit=1000)
            assert [s.rollout.rollout_id for s in page.rows] == [
                s.rollout.rollout_id for s in expected if any(role in s.roles for role in roles)
            ]
    finally:
        await reopened.close()


async def test_two_stores_on_one_file_never_claim_the_same_rollout(tmp_path: Path) -> None:
    one, two = SqliteStore(tmp_path / "shared.db"), SqliteStore(tmp_path / "shared.db")
    try:
        rollouts = await one.enqueue([RolloutRequest(input=i) for i in range(30)])
        results = await asyncio.gather(*(store.claim(f"w{i}") for i in range(40) for store in (one, two)))
        claimed = [result[0].rollout_id for result in results if result is not None]
        assert sorted(claimed) == sorted(r.rollout_id for r in rollouts)
    finally:
        await one.close()
        await two.close()


async def test_reads_go_on_while_a_write_waits_for_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    try:
        await store.enqueue([RolloutRequest(input="x")])
        claimed = await store.claim("w")
        assert claimed is not None
        rollout, attempt = claimed
        await store.add_spans([make_span(rollout.rollout_id, attempt.attempt_id, "s-1")])
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        write = asyncio.create_task(store.add_spans([make_span(rollout.rollout_id, attempt.attempt_id, "s-2")]))
        assert [s.span_id for s in await store.query_spans(rollout.rollout_id)] == ["s-1"]
        assert await store.get_rollout(rollout.rollout_id) == rollout
        assert not write.done()
        blocker.rollback()
        blocker.close()
        await asyncio.wait_for(write, 30)
        assert [s.span_id for s in await store.query_spans(rollout.rollout_id)] == ["s-1", "s-2"]
    finally:
        await store.close()


async def test_concurrent_writes_share_commits_and_a_failing_one_is_undone_alone(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        (rollout,) = await store.enqueue([RolloutRequest(input="x")])
        rid = rollout.rollout_id
        assert await store.claim("w") is not None
        aid = f"{rid}-a1"
        writes = [store.add_spans([make_span(rid, aid, f"s-{i}")]) for i in range(200)]
        writes.insert(100, store.add_spans([make_span(rid, aid, "s-bad"), make_span("ro-missing", "a1", "s-x")]))
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert [type(r) for r in results if r is not None] == [NotFoundError]
        spans = await store.query_spans(rid)
        assert sorted(s.span_id for s in spans) == sorted(f"s-{i}" for i in range(200))
        stats = await store.stats()
        assert stats.spans == 200
        assert stats.extra["commits_since_open"] < stats.extra["writes_since_open"] / 4
    finally:
        await store.close()


async def test_a_failed_write_names_its_operation_and_keeps_sqlites_error(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    try:
        with sqlite3.connect(path) as other:
            other.execute("CREATE TRIGGER refuse BEFORE INSERT ON resources BEGIN SELECT RAISE(ABORT, 'refused'); END")
        with pytest.raises(StoreError, match=r"\(publish_resources\): refused$") as raised:
            await store.publish_resources({"model": "m"})
        assert isinstance(raised.value.__cause__, sqlite3.IntegrityError)
    finally:
        await store.close()


def test_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert SqliteStore.from_url("sqlite:///runs/a.db").path == Path("runs/a.db")
    assert SqliteStore.from_url(f"sqlite:///{tmp_path}/b.db").path == tmp_path / "b.db"
    assert (tmp_path / "runs" / "a.db").exists()
    for bad in ("sqlite://a.db", "sqlite:///", "postgres:///x"):
        with pytest.raises(ConfigError, match="sqlite:///relative"):
            SqliteStore.from_url(bad)


_WRITER = r"""
import asyncio, sys
from relight.records import RolloutRequest, Span
from relight.stores.sqlite import SqliteStore
from relight.summaries import RolloutSummary, SummaryFilter

async def main(path: str) -> None:
    store = SqliteStore(path)
    await store.enqueue([RolloutRequest(input="durable", rollout_id="ro-kill")])
    await store.claim("w")
    batch = 0
    while True:
        await store.add_spans([
            Span(rollout_id="ro-kill", attempt_id="ro-kill-a1", span_id=f"s-{batch}-{i}", trace_id="t", name="step",
                 start_time=batch, end_time=batch, attributes={"payload": "x" * 2000, "batch": batch, "i": i})
            for i in range(50)
        ])
        print(batch, flush=True)  # batch is committed
        batch += 1

asyncio.run(main(sys.argv[1]))
"""


async def test_sigkill_mid_write_keeps_every_committed_span(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", _WRITER, str(path), stdout=subprocess.PIPE)
    assert child.stdout is not None
    committed = -1
    try:
        while committed < 30 and (line := await child.stdout.readline()):
            committed = int(line)
    finally:
        child.kill()
        await child.wait()
    assert committed >= 30, "the writer process died before committing 30 batches"

    store = SqliteStore(path)
    try:
        spans = await store.query_spans("ro-kill")
        by_id = {span.span_id: span for span in spans}
        for batch in range(committed + 1):
            for i in range(50):
                span = by_id[f"s-{batch}-{i}"]
                assert span.attributes == {"payload": "x" * 2000, "batch": batch, "i": i}
        assert len(spans) % 50 == 0, "a batch was stored in part"
        assert (await store.stats()).spans == len(spans)
    finally:
        await store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
