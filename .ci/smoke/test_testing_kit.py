"""relight-testing from its wheel: the store conformance kit passes on the in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from relight.store import Store
from relight.stores import InMemoryStore
from relight_testing.clock import ManualClock
from relight_testing.store import StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock) -> AsyncIterator[Store]:
        store = InMemoryStore(clock=clock)
        yield store
        await store.close()
