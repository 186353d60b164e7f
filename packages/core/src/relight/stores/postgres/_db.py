"""The PostgreSQL store's connections: a pool, one LISTEN connection, and retries of transient failures.

:class:`Database` runs a store's transactions and reads on pooled connections, retrying those that
fail for a reason that passes (the server restarting, a dropped connection, a deadlock) with
backoff (relight's :class:`relight._internal.retry.RetryPolicy`). Its listener holds one connection that ``LISTEN``s on
:data:`CHANNEL` and bumps :class:`Changes` on every notification, so waiters in this process wake
on commits made anywhere; after reconnecting it wakes them all, since it may have missed some.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg import errors
from psycopg_pool import AsyncConnectionPool

from relight._internal.retry import RetryPolicy, retry_async
from relight.errors import StoreError
from relight.stores import _rules
from relight.stores._changes import Changes
from relight.stores.postgres._conn import Conn
from relight.stores.postgres._rows import Tx
from relight.stores.postgres._schema import CHANNEL, migrate

__all__ = ["Database"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT_STATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
"""Serialization failure, deadlock, lock not available, server shutting down or starting, too many connections."""


class Database:
    """A PostgreSQL database as a store uses it; opened on first use, from within the store's event loop."""

    def __init__(self, url: str, changes: Changes, *, sizes: tuple[int, int], retry: RetryPolicy) -> None:
        self.url = url
        self.changes = changes
        self.retry = retry
        self.closed = False
        self.retries = 0
        """Transient failures retried since the store was opened."""
        self._sizes = sizes
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._opening = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None

    async def transact(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run ``fn`` in one transaction, retried on transient failures; a state change sends NOTIFY."""
        retry = False
        pool = await self._ready()

        async def once() -> tuple[T, bool]:
            nonlocal retry
            async with pool.connection() as conn, conn.transaction():
                tx = Tx(conn, retry)
                retry = True
                result = await fn(tx)
                if tx.changed:
                    await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
            return result, tx.changed

        result, changed = await self._retrying(once)
        if changed:
            self.changes.notify()  # this process's waiters need not wait for the notification's round trip
        return result

    async def read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` on a pooled connection (autocommit: each statement sees the latest commit)."""
        pool = await self._ready()

        async def once() -> T:
            async with pool.connection() as conn:
                return await fn(conn)

        return await self._retrying(once)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.changes.notify()  # waiters wake and find the store closed
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()

    async def _ready(self) -> AsyncConnectionPool[Conn]:
        """The pool, opened (and the schema migrated, the listener started) on first use."""
        self._check_open()
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                await self._retrying(self._migrate)
                self._check_open()
                pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                    self.url,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    kwargs={"autocommit": True},
                    open=False,
                    name="relight-store",
                )
                await pool.open()
                self._listener = asyncio.create_task(self._listen(), name="relight-postgres-listener")
                self._pool = pool
            return self._pool

    async def _migrate(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await migrate(conn)

    async def _retrying(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Call ``fn`` until it succeeds, retrying transient PostgreSQL failures as :attr:`retry` says."""

        async def once() -> T:
            self._check_open()
            return await fn()

        def retried(error: BaseException) -> None:
            self.retries += 1
            logger.warning("relight: PostgreSQL store: %s; retrying", str(error).strip())

        try:
            return await retry_async(
                once, policy=self.retry, transient=self._transient, what="PostgreSQL store call", on_retry=retried
            )
        except psycopg.Error as error:
            if self.closed:
                raise _rules.closed() from error
            raise StoreError(f"PostgreSQL store at {_safe(self.url)} failed: {error}") from error

    def _transient(self, error: BaseException) -> bool:
        return not self.closed and isinstance(error, psycopg.Error) and _transient(error)

    async def _listen(self) -> None:
        """Hold a LISTEN connection and wake this store's waiters on every notification, reconnecting as needed."""
        failures = 0
        while not self.closed:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}".encode())
                    failures = 0
                    self.changes.notify()  # a change made while not listening is not missed
                    async for _ in conn.notifies():
                        self.changes.notify()
            except psycopg.Error as error:
                if self.closed:
                    return
                logger.warning("relight: PostgreSQL store: listening for changes failed (%s); reconnecting", error)
                self.changes.notify()
                await asyncio.sleep(self.retry.delay(min(failures, 16)))  # the store's backoff, with its cap
                failures += 1

    def _check_open(self) -> None:
        if self.closed:
            raise _rules.closed()


def _transient(error: psycopg.Error) -> bool:
    if isinstance(error, errors.QueryCanceled):
        return False
    if error.sqlstate is None:  # no answer from the server: the connection broke or could not be made
        return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
    return error.sqlstate in _TRANSIENT_STATES or error.sqlstate.startswith("08")


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}://{credentials.split(':')[0]}{at}{host}" if at else url
