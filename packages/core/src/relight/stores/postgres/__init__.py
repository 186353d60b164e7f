"""The PostgreSQL store, for many machines: ``pip install 'relight[postgres]'``."""

from relight.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
