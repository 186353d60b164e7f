"""The PostgreSQL store against a real PostgreSQL server the test run starts (skipped, with the reason, without one)."""

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from relight import open_store
from relight._internal.retry import RetryPolicy
from relight.errors import ConfigError, StoreError
from relight.records import AttemptStatus, RolloutRequest, RolloutStatus
from relight.store import Store
from relight.stores.http import HttpStore
from relight_testing.clock import ManualClock
from relight_testing.postgres import PostgresServer, postgres_unavailable
from relight_testing.store import SETTLE, StoreConformance, make_span
from relight_testing.store_summaries import check_migrated, fill_varied, summaries_from_spans

_UNAVAILABLE = postgres_unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")

if _UNAVAILABLE is None:
    import psycopg

    from relight.stores.postgres import PostgresStore
    from relight.stores.postgres._schema import SCHEMA_VERSION


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture
def database(server: PostgresServer) -> str:
    """A fresh, empty schema on the module's server, as a store URL."""
    return server.create_schema()


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock, database: str) -> AsyncIterator[Store]:
        store = PostgresStore(database, clock=clock)
        yield store
        await store.close()


async def test_a_claim_wakes_on_another_stores_commit(database: str) -> None:
    # Two stores share nothing in this process but the database: only NOTIFY can wake the waiter.
    waiter, other = PostgresStore(database), PostgresStore(database)
    try:
        await waiter.stats()  # opened and listening
        waiting = asyncio.create_task(waiter.claim("w1", timeout=SETTLE * 3))
        done, _ = await asyncio.wait({waiting}, timeout=0.2)
        assert not done
        (rollout,) = await other.enqueue([RolloutRequest(input="x")])
        claimed = await asyncio.wait_for(waiting, SETTLE)
        assert claimed is not None
        assert claimed[0].rollout_id == rollout.rollout_id
    finally:
        await waiter.close()
        await other.close()


async def test_two_stores_never_claim_the_same_rollout(database: str) -> None:
    one, two = PostgresStore(database), PostgresStore(database)
    try:
        rollouts = await one.enqueue([RolloutRequest(input=i) for i in range(30)])
        results = await asyncio.gather(*(store.claim(f"w{i}") for i in range(20) for store in (one, two)))
        claimed = [result[0].rollout_id for result in results if result is not None]
        assert sorted(claimed) == sorted(r.rollout_id for r in rollouts)
    finally:
        await one.close()
        await two.close()


async def test_the_schema_is_versioned_and_a_newer_one_is_refused(database: str) -> None:
    store = PostgresStore(database)
    (rollout,) = await store.enqueue([RolloutRequest(input="kept")])
    await store.close()
    reopened = PostgresStore(database)
    try:
        assert await reopened.get_rollout(rollout.rollout_id) == rollout
    finally:
        await reopened.close()
    with psycopg.connect(database, autocommit=True) as conn:
        versions = conn.execute("SELECT version FROM relight_schema ORDER BY version").fetchall()
        assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
        conn.execute("INSERT INTO relight_schema VALUES (%s)", (SCHEMA_VERSION + 1,))
    newer = PostgresStore(database, retry=RetryPolicy(attempts=1))
    try:
        with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}, newer"):
            await newer.stats()
    finally:
        await newer.close()


async def test_a_database_made_before_summaries_gets_them_when_migrated(database: str) -> None:
    store = PostgresStore(database)
    await fill_varied(store)
    expected = await summaries_from_spans(store)
    await store.close()
    with psycopg.connect(database, autocommit=True) as conn:  # as the previous release's schema left it
        conn.execute("DROP TABLE relight_summaries")
        conn.execute("DROP SEQUENCE relight_summary_changes")
        conn.execute("DELETE FROM relight_schema WHERE version > 1")
    await check_migrated(PostgresStore(database), expected)


async def test_urls_and_options_are_checked(database: str) -> None:
    store = open_store(database.replace("postgresql://", "postgres://"))
    assert isinstance(store, PostgresStore)
    await store.close()
    with pytest.raises(ConfigError, match="min_connections"):
        PostgresStore(database, min_connections=5, max_connections=2)
    unreachable = PostgresStore("postgresql://nobody:secret@127.0.0.1:1/none", retry=RetryPolicy(attempts=2))
    with pytest.raises(StoreError, match=r"postgresql://nobody@127\.0\.0\.1:1/none") as raised:
        await unreachable.stats()
    assert "secret" not in str(raised.value)
    await unreachable.close()


async def test_store_serve_shares_it_over_http(database: str) -> None:
    command = [sys.executable, "-m", "relight.cli", "store", "serve", "--store", database, "--port", "0"]
    serve = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE, env={**os.environ, "COLUMNS": "500"})
    assert serve.stdout is not None
    line = (await asyncio.wait_for(serve.stdout.readline(), 60)).decode()
    url = line.rsplit(" at ", 1)[-1].strip()
    client, direct = HttpStore(url), PostgresStore(database)
    try:
        waiting = asyncio.create_task(client.claim("remote", timeout=SETTLE * 3))
        done, _ = await asyncio.wait({waiting}, timeout=0.2)
        assert not done
        (rollout,) = await direct.enqueue([RolloutRequest(input="over http")])
        claimed = await asyncio.wait_for(waiting, SETTLE)
        assert claimed is not None
        rollout_id, attempt_id = claimed[0].rollout_id, claimed[1].attempt_id
        assert rollout_id == rollout.rollout_id
        await client.add_spans([make_span(rollout_id, attempt_id, f"s-{i}") for i in range(3)])
        await client.finish_attempt(rollout_id, attempt_id, AttemptStatus.SUCCEEDED)
        assert (await direct.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
        assert [s.span_id for s in await direct.query_spans(rollout_id)] == ["s-0", "s-1", "s-2"]
        assert (await client.stats()).extra["backend"] == "postgresql"
    finally:
        await client.close()
        await direct.close()
        serve.terminate()
        await serve.wait()
