"""Store backends. Open one by URL with :func:`relight.open_store`.

``memory://`` (:class:`InMemoryStore`), ``sqlite:///path.db`` (:class:`SqliteStore`, the embedded
default), ``postgresql://user@host/db`` (:class:`relight.stores.postgres.PostgresStore`, with
``pip install 'relight[postgres]'``) and ``http://host:port`` (:class:`HttpStore`, a client of
``relight store serve``). Every backend passes the conformance kit in :mod:`relight_testing.store`.
"""

from relight.stores.http import HttpStore
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore

__all__ = ["HttpStore", "InMemoryStore", "SqliteStore"]
