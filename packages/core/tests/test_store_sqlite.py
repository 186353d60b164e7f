from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relight.store import Store
from relight.stores.sqlite import SqliteStore
from relight.testing.store import ManualClock, StoreConformance


class TestSqliteStore(StoreConformance):
    @pytest.fixture
    async def store(self, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Store]:
        store = SqliteStore(tmp_path / "store.db", clock=clock)
        yield store
        await store.close()
