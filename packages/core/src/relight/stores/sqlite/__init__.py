"""The SQLite store, relight's embedded default: one file, WAL, writes batched on one thread."""

from relight.stores.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
