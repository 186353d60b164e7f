"""The SQLite store's one writer thread, and the checkpointer beside it.

Writes never run on the caller's thread. They queue for one writer thread, which commits every job
that has gathered in a single transaction, each under its own savepoint so that a job that fails
(an unknown rollout, a lost lease) is undone alone. Many small writes thus cost one commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from relight.errors import StoreError
from relight.stores import _rules

__all__ = ["Job", "Tx", "Writer", "connect"]

T = TypeVar("T")


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA synchronous = NORMAL")  # in WAL mode: a commit survives the process being killed
    return conn


@dataclass(slots=True)
class Tx:
    """One job's view of the writer's transaction.

    ``changed`` says whether waiters should wake; ``size`` is about how many bytes the job wrote.

    A job keeps no cursor of ``conn`` that still holds a statement: it takes what it needs from a
    cursor at once (``fetchall``, ``rowcount``) or iterates it to the end. A cursor left by
    ``executemany``, or one whose last row was fetched but not iterated past, holds one of the
    connection's cached statements, and a job's frames can outlive the job and be freed on another
    thread: a sampling profiler holds them a moment, a failing job's traceback goes to the caller's
    loop. The cursor freed there resets that statement from there, racing the writer's own use of
    it, whose next use then fails with SQLITE_MISUSE ("bad parameter or other API misuse").
    """

    conn: sqlite3.Connection
    changed: bool = False
    size: int = 1024


@dataclass(slots=True)
class Job(Generic[T]):
    fn: Callable[[Tx], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[tuple[T, bool]]

    def settle(self, result: tuple[T, bool] | None, error: BaseException | None) -> None:
        """Hand the outcome to the caller's loop (from the writer thread)."""
        with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(_settle, self.future, result, error)


def _settle(future: asyncio.Future[tuple[T, bool]], result: tuple[T, bool] | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    elif result is not None:
        future.set_result(result)


class Writer:
    """The one thread that writes: takes every job queued so far and commits them together."""

    def __init__(self, path: Path, max_jobs_per_commit: int) -> None:
        self._path = path
        self._max_jobs = max_jobs_per_commit
        self._jobs: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped = False
        self.jobs = 0
        self.commits = 0
        """Jobs run and transactions committed so far: many jobs per commit means writes batch."""
        self._connection = connect(path)
        self._connection.execute("PRAGMA wal_autocheckpoint = 0")  # the checkpointer's job
        self._checkpointer = _Checkpointer(path)
        self._unchecked_bytes = 0
        self._thread = threading.Thread(target=self._run, name="relight-sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Job[Any]) -> None:
        with self._lock:
            if self._stopped:
                raise _rules.closed()
            self._jobs.put(job)

    def stop(self) -> None:
        """Commit what is queued, then end the thread and close its connection."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._jobs.put(None)
        self._thread.join()
        self._checkpointer.stop()

    def _run(self) -> None:
        try:
            while True:
                batch = [self._jobs.get()]
                while batch[-1] is not None and len(batch) < self._max_jobs:
                    try:
                        batch.append(self._jobs.get_nowait())
                    except queue.Empty:
                        break
                # A job whose caller gave up (a claim whose client went away) is not run at all.
                jobs = [job for job in batch if job is not None and not job.future.done()]
                if jobs:
                    self._commit(jobs)
                if batch[-1] is None:
                    return
        finally:
            self._connection.close()

    def _commit(self, jobs: list[Job[Any]]) -> None:
        conn = self._connection
        outcomes: list[tuple[Job[Any], tuple[Any, bool] | None, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                tx = Tx(conn)
                conn.execute("SAVEPOINT job")
                try:
                    result = job.fn(tx)
                except Exception as error:
                    conn.execute("ROLLBACK TO job")
                    outcomes.append((job, None, self._as_store_error(error, _operation(job))))
                else:
                    outcomes.append((job, (result, tx.changed), None))
                    self._unchecked_bytes += tx.size
                conn.execute("RELEASE job")
            conn.execute("COMMIT")
            self.jobs += len(jobs)
            self.commits += 1
            if self._unchecked_bytes >= _CHECKPOINT_BYTES:
                self._unchecked_bytes = 0
                self._checkpointer.request()
        except sqlite3.Error as error:
            if conn.in_transaction:
                conn.rollback()
            operation = f"the commit of {', '.join(sorted({_operation(job) for job in jobs}))}"
            outcomes = [(job, None, self._as_store_error(error, operation)) for job in jobs]
        for job, result, error in outcomes:
            job.settle(result, error)

    def _as_store_error(self, error: Exception, operation: str) -> Exception:
        """A StoreError naming the operation, caused by (so showing the traceback of) SQLite's error."""
        if isinstance(error, sqlite3.Error):
            failure = StoreError(f"could not write to the SQLite store at {str(self._path)!r} ({operation}): {error}")
            failure.__cause__ = error  # raised on the caller's loop, not here, so no `raise ... from`
            return failure
        return error


def _operation(job: Job[Any]) -> str:
    """The store method whose write ``job`` is: ``add_spans`` for ``SqliteStore.add_spans.<locals>.job``."""
    return job.fn.__qualname__.removesuffix(".<locals>.job").rpartition(".")[2]


_CHECKPOINT_BYTES = 8 * 1024 * 1024
"""How much the writer commits between two checkpoints (SQLite's own default is ~4 MB of pages)."""


class _Checkpointer:
    """Copies committed pages from the WAL into the database file on a thread and connection of its own.

    Left to SQLite, the commit that fills the WAL does this copy (and its fsyncs) itself, which makes
    that commit, and every write queued behind it, wait; here it runs beside the writer.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._wanted = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="relight-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def request(self) -> None:
        self._wanted.set()

    def stop(self) -> None:
        self._stopped = True
        self._wanted.set()
        self._thread.join()

    def _run(self) -> None:
        conn = connect(self._path)
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopped:
                    return
                with contextlib.suppress(sqlite3.Error):  # busy with another process's checkpoint: next time
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()
