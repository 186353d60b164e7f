import asyncio
from collections.abc import AsyncIterator

import pytest

from relight.records import RolloutRequest, RolloutStatus
from relight.store import Store
from relight.stores.memory import InMemoryStore
from relight_testing.clock import ManualClock
from relight_testing.store import SETTLE, StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock) -> AsyncIterator[Store]:
        store = InMemoryStore(clock=clock)
        yield store
        await store.close()


async def test_a_claim_cancelled_as_a_rollout_arrives_stays_cancelled() -> None:
    store = InMemoryStore()
    claiming = asyncio.create_task(store.claim("stopping", timeout=SETTLE))
    await asyncio.sleep(0)  # the claim looks, finds nothing and waits for a change
    (rollout,) = await store.enqueue([RolloutRequest(input="x")])  # wakes it, and in the same instant...
    claiming.cancel()  # ...its worker stops
    with pytest.raises(asyncio.CancelledError):
        await claiming
    assert (await store.get_rollout(rollout.rollout_id)).status is RolloutStatus.QUEUED
    await store.close()
