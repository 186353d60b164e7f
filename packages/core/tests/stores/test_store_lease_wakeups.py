"""Waiters wake by themselves when a lease runs out, on the real clock, in every backend."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relight.records import RolloutRequest, RolloutStatus
from relight.store import Store
from relight.stores.http import HttpStore
from relight.stores.http.server import running_server
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight_testing.store import SETTLE

LEASE = 0.3


@pytest.fixture(params=["memory", "sqlite", "http"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "http":
        with running_server(SqliteStore(tmp_path / "served.db")) as url:
            client = HttpStore(url)
            yield client
            await client.close()
        return
    store: Store = InMemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "store.db")
    yield store
    await store.close()


async def test_a_waiting_claim_gets_the_retry_when_the_lease_runs_out(store: Store) -> None:
    (rollout,) = await store.enqueue([RolloutRequest(input="x", max_attempts=2)])
    assert await store.claim("dies", lease_seconds=LEASE) is not None
    claimed = await asyncio.wait_for(store.claim("w2", timeout=SETTLE), SETTLE)
    assert claimed is not None
    assert (claimed[0].rollout_id, claimed[1].number) == (rollout.rollout_id, 2)


async def test_wait_returns_when_the_last_lease_runs_out(store: Store) -> None:
    (rollout,) = await store.enqueue([RolloutRequest(input="x", max_attempts=1)])
    assert await store.claim("dies", lease_seconds=LEASE) is not None
    (failed,) = await asyncio.wait_for(store.wait([rollout.rollout_id]), SETTLE)
    assert failed.status is RolloutStatus.FAILED
