"""Store backends. Open one by URL with :func:`relight.open_store`."""

from relight.stores.memory import InMemoryStore

__all__ = ["InMemoryStore"]
