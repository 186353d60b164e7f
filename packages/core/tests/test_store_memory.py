from collections.abc import AsyncIterator

import pytest

from relight.store import Store
from relight.stores.memory import InMemoryStore
from relight.testing.store import ManualClock, StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock) -> AsyncIterator[Store]:
        store = InMemoryStore(clock=clock)
        yield store
        await store.close()
