"""A SQLite store: the embedded default. One file, no server, and nothing committed is lost to a crash.

Open it with ``relight.open_store("sqlite:///runs/store.db")`` (a relative path, as in SQLAlchemy;
``sqlite:////abs/store.db`` for an absolute one) or ``SqliteStore(path)``.

Writes never run on the caller's thread. They queue for one writer thread, which commits every job
that has gathered in a single transaction, each under its own savepoint so that a job that fails
(an unknown rollout, a lost lease) is undone alone. Many small writes thus cost one commit, and
claims stay atomic because every claim is a write transaction: two workers never get one attempt,
even from two processes sharing the file. Reads run on a small thread pool, one connection per
thread; in WAL mode they see the last commit without waiting for the writer.

Waiting is event-driven within the process: a commit that changes a rollout's state wakes its
waiters, and a waiter also wakes at the next lease expiry. A waiter is not woken by another
process's commits until its next wake-up, so processes that wait on each other's work should share
the store through its HTTP server (``relight store serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import JsonValue

from relight.errors import ConfigError, StoreError
from relight.models import (
    Attempt,
    AttemptStatus,
    Mode,
    Resources,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    Span,
    StoreStats,
)
from relight.store import DEFAULT_LEASE_SECONDS
from relight.stores import _rules
from relight.stores._changes import Changes, deadline_after
from relight.stores._json import span_json

__all__ = ["SqliteStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    seq INTEGER PRIMARY KEY,
    rollout_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    group_id TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rollouts_by_status ON rollouts (status);
CREATE INDEX IF NOT EXISTS rollouts_by_group ON rollouts (group_id);
CREATE TABLE IF NOT EXISTS queue (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    rollout_id TEXT NOT NULL UNIQUE,
    mode TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    status TEXT NOT NULL,
    lease_expires_at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (rollout_id, attempt_id)
);
CREATE INDEX IF NOT EXISTS running_attempts_by_lease ON attempts (lease_expires_at) WHERE status = 'running';
CREATE TABLE IF NOT EXISTS spans (
    sequence_id INTEGER PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (rollout_id, attempt_id, span_id)
);
CREATE TABLE IF NOT EXISTS resources (version INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('spans', 0);
"""


class SqliteStore:
    """A :class:`relight.store.Store` in one SQLite file (created with its folder when missing).

    Args:
        path: the database file.
        clock: wall-clock time for leases and timestamps; tests pass a manual one.
        readers: threads (each with its own connection) that serve reads.
        max_jobs_per_commit: how many queued writes one transaction may take.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        readers: int = 4,
        max_jobs_per_commit: int = 512,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._changes = Changes(clock)
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            setup = _connect(self.path)
            try:
                # Spans are ~2 KB: on 4 KB pages each would fill a page alone; 16 KB pages hold several,
                # which halves the cost of an insert. Only a new file takes it.
                setup.execute("PRAGMA page_size = 16384")
                setup.execute("PRAGMA journal_mode = WAL")
                setup.executescript(_SCHEMA)
            finally:
                setup.close()
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"cannot open the SQLite store at {str(self.path)!r}: {error}") from error
        self._writer = _Writer(self.path, max_jobs_per_commit)
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="relight-sqlite-read")
        self._reader_local = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStore:
        """Open ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``."""
        prefix = "sqlite:///"
        if not url.startswith(prefix) or len(url) == len(prefix):
            raise ConfigError(
                f"SQLite store URL {url!r} must look like sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        return cls(url[len(prefix) :], **options)

    # -- rollouts -----------------------------------------------------------------------------

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        _rules.check_requests(requests)
        requests = list(requests)

        def job(tx: _Tx) -> list[Rollout]:
            now = self._clock()
            result: list[Rollout] = []
            for request in requests:
                existing = _find_rollout(tx.conn, request.rollout_id) if request.rollout_id else None
                if existing is not None:
                    result.append(existing)
                    continue
                rollout = _rules.new_rollout(request, now)
                tx.conn.execute(
                    "INSERT INTO rollouts (rollout_id, status, mode, group_id, data) VALUES (?, ?, ?, ?, ?)",
                    (rollout.rollout_id, rollout.status, rollout.mode, rollout.group_id, rollout.model_dump_json()),
                )
                _queue(tx, rollout)
                result.append(rollout)
            return result

        return await self._write(job)

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float = 0.0,
        mode: Mode | None = None,
    ) -> tuple[Rollout, Attempt] | None:
        self._check_open()
        _rules.check_lease_seconds(lease_seconds)

        def job(tx: _Tx) -> tuple[tuple[Rollout, Attempt] | None, float | None]:
            now = self._reap(tx)
            row = tx.conn.execute(
                "SELECT rollout_id FROM queue WHERE ?1 IS NULL OR mode = ?1 ORDER BY position LIMIT 1", (mode,)
            ).fetchone()
            if row is None:
                return None, _next_expiry(tx.conn)
            tx.conn.execute("DELETE FROM queue WHERE rollout_id = ?", row)
            rollout, attempt = _rules.start_attempt(_get_rollout(tx.conn, row[0]), worker_id, lease_seconds, now)
            _save_rollout(tx, rollout)
            tx.conn.execute(
                "INSERT INTO attempts (rollout_id, attempt_id, number, status, lease_expires_at, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    attempt.rollout_id,
                    attempt.attempt_id,
                    attempt.number,
                    attempt.status,
                    attempt.lease_expires_at,
                    attempt.model_dump_json(),
                ),
            )
            return (rollout, attempt), None

        deadline = deadline_after(timeout)
        while True:
            seen = self._changes.version
            claimed, next_expiry = await self._write(job)
            if claimed is not None:
                return claimed
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=next_expiry):
                return None

    async def heartbeat(
        self, rollout_id: str, attempt_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Attempt:
        _rules.check_lease_seconds(lease_seconds)

        def job(tx: _Tx) -> Attempt:
            now = self._reap(tx)
            attempt = _get_attempt(tx.conn, rollout_id, attempt_id)
            _rules.require_running(attempt)
            attempt = attempt.model_copy(update={"lease_expires_at": now + lease_seconds})
            _save_attempt(tx, attempt)
            return attempt

        return await self._write(job)

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus,
        *,
        error: str | None = None,
    ) -> Rollout:
        _rules.check_client_status(status)

        def job(tx: _Tx) -> Rollout:
            now = self._reap(tx)
            attempt = _get_attempt(tx.conn, rollout_id, attempt_id)
            rollout, ended = _rules.end_attempt(_get_rollout(tx.conn, rollout_id), attempt, status, error, now)
            _store_outcome(tx, rollout, ended)
            return rollout

        return await self._write(job)

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        rollout_ids = list(rollout_ids)

        def job(tx: _Tx) -> list[Rollout]:
            now = self._clock()
            result: list[Rollout] = []
            for rollout_id in rollout_ids:
                found = _get_rollout(tx.conn, rollout_id)
                rollout, cancelled = _rules.cancel_rollout(found, _attempts(tx.conn, rollout_id), now)
                if rollout is not found:
                    _save_rollout(tx, rollout)
                    tx.conn.execute("DELETE FROM queue WHERE rollout_id = ?", (rollout_id,))
                for attempt in cancelled:
                    _save_attempt(tx, attempt)
                result.append(rollout)
            return result

        return await self._write(job)

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        rollout_ids = list(rollout_ids)

        def look(conn: sqlite3.Connection) -> tuple[list[Rollout], float | None]:
            return [_get_rollout(conn, rollout_id) for rollout_id in rollout_ids], _next_expiry(conn)

        deadline = deadline_after(timeout)
        while True:
            seen = self._changes.version
            rollouts, next_expiry = await self._read(look)
            if all(rollout.is_finished for rollout in rollouts):
                return rollouts
            if next_expiry is not None and next_expiry <= self._clock():
                await self._write(self._reap)
                continue
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=next_expiry):
                return rollouts

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return await self._read(lambda conn: _get_rollout(conn, rollout_id))

    async def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        group_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Rollout]:
        _rules.check_page(limit, offset)

        def read(conn: sqlite3.Connection) -> list[Rollout]:
            rows = conn.execute(
                "SELECT data FROM rollouts WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR mode = ?2) "
                "AND (?3 IS NULL OR group_id = ?3) ORDER BY seq LIMIT ?4 OFFSET ?5",
                (status, mode, group_id, -1 if limit is None else limit, offset),
            )
            return [Rollout.model_validate_json(data) for (data,) in rows]

        return await self._read(read)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        def read(conn: sqlite3.Connection) -> list[Attempt]:
            _get_rollout(conn, rollout_id)
            return _attempts(conn, rollout_id)

        return await self._read(read)

    # -- spans --------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> None:
        if not spans:
            self._check_open()
            return
        spans = list(spans)
        _rules.check_spans(spans)

        def job(tx: _Tx) -> None:
            for rollout_id, attempt_id in sorted({(span.rollout_id, span.attempt_id) for span in spans}):
                _require_attempt(tx.conn, rollout_id, attempt_id)
            # Sequence ids are given here, so the stored JSON is the span exactly as queried. A duplicate
            # is ignored and leaves its id unused: ids only need to grow.
            (last,) = tx.conn.execute("SELECT COALESCE(MAX(sequence_id), -1) FROM spans").fetchone()
            rows = [
                (seq, span.rollout_id, span.attempt_id, span.span_id, span_json(span, sequence_id=seq).decode())
                for seq, span in enumerate(spans, start=last + 1)
            ]
            cursor = tx.conn.executemany(
                "INSERT OR IGNORE INTO spans (sequence_id, rollout_id, attempt_id, span_id, data) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            if cursor.rowcount < len(rows):
                _check_repeats(tx.conn, rows, spans)
            tx.conn.execute("UPDATE counters SET value = value + ? WHERE name = 'spans'", (cursor.rowcount,))
            tx.size = sum(len(data) for *_, data in rows)

        await self._write(job)

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        def read(conn: sqlite3.Connection) -> list[Span]:
            _get_rollout(conn, rollout_id)
            rows = conn.execute(
                "SELECT data FROM spans WHERE rollout_id = ?1 AND (?2 IS NULL OR attempt_id = ?2) ORDER BY sequence_id",
                (rollout_id, attempt_id),
            )
            return [Span.model_validate_json(data) for (data,) in rows]

        return await self._read(read)

    # -- resources ----------------------------------------------------------------------------

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        items = dict(items)
        _rules.check_resources(items)

        def job(tx: _Tx) -> Resources:
            (version,) = tx.conn.execute("SELECT COALESCE(MAX(version) + 1, 0) FROM resources").fetchone()
            resources = Resources(version=version, items=items, created_at=self._clock())
            tx.conn.execute("INSERT INTO resources VALUES (?, ?)", (version, resources.model_dump_json()))
            return resources

        return await self._write(job)

    async def get_resources(self, version: int | None = None) -> Resources:
        _rules.check_version(version)

        def read(conn: sqlite3.Connection) -> Resources:
            row = conn.execute(
                "SELECT data FROM resources WHERE version = COALESCE(?, (SELECT MAX(version) FROM resources))",
                (version,),
            ).fetchone()
            if row is None:
                (count,) = conn.execute("SELECT COUNT(*) FROM resources").fetchone()
                raise _rules.resources_not_found(version, count)
            return Resources.model_validate_json(row[0])

        return await self._read(read)

    async def stats(self) -> StoreStats:
        def read(conn: sqlite3.Connection) -> StoreStats:
            return StoreStats(
                rollouts_by_status=dict(conn.execute("SELECT status, COUNT(*) FROM rollouts GROUP BY status")),
                attempts_by_status=dict(conn.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status")),
                spans=conn.execute("SELECT value FROM counters WHERE name = 'spans'").fetchone()[0],
                resources_versions=conn.execute("SELECT COUNT(*) FROM resources").fetchone()[0],
                extra={
                    "backend": "sqlite",
                    "path": str(self.path),
                    "writes_since_open": self._writer.jobs,
                    "commits_since_open": self._writer.commits,
                },
            )

        return await self._read(read)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._changes.notify()  # waiters wake and find the store closed
        await asyncio.to_thread(self._shut_down)

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise _rules.closed()

    async def _write(self, fn: Callable[[_Tx], T]) -> T:
        """Run ``fn`` in the writer's next transaction; wake waiters if it changed a rollout's state."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[T, bool]] = loop.create_future()
        self._writer.submit(_Job(fn, loop, future))
        result, changed = await future
        if changed:
            self._changes.notify()
        return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on a reader thread, inside one read transaction (a consistent snapshot)."""
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._read_now, fn)

    def _read_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._reader_local, "connection", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = 1")
            self._reader_local.connection = conn
            with self._reader_lock:
                self._reader_connections.append(conn)
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as error:
            raise StoreError(f"could not read the SQLite store at {str(self.path)!r}: {error}") from error

    def _reap(self, tx: _Tx) -> float:
        """End every attempt whose lease has run out (on the writer thread); returns the time used."""
        now = self._clock()
        rows = tx.conn.execute(
            "SELECT rollout_id, data FROM attempts WHERE status = 'running' AND lease_expires_at <= ?", (now,)
        ).fetchall()
        for rollout_id, data in rows:
            attempt = Attempt.model_validate_json(data)
            rollout, ended = _rules.end_attempt(
                _get_rollout(tx.conn, rollout_id), attempt, AttemptStatus.EXPIRED, _rules.expiry_error(attempt), now
            )
            _store_outcome(tx, rollout, ended)
        return now

    def _shut_down(self) -> None:
        self._writer.stop()
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_connections:
                conn.close()
            self._reader_connections.clear()


# -- the writer thread ------------------------------------------------------------------------


@dataclass(slots=True)
class _Tx:
    """One job's view of the writer's transaction.

    ``changed`` says whether waiters should wake; ``size`` is about how many bytes the job wrote.
    """

    conn: sqlite3.Connection
    changed: bool = False
    size: int = 1024


@dataclass(slots=True)
class _Job(Generic[T]):
    fn: Callable[[_Tx], T]
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


class _Writer:
    """The one thread that writes: takes every job queued so far and commits them together."""

    def __init__(self, path: Path, max_jobs_per_commit: int) -> None:
        self._path = path
        self._max_jobs = max_jobs_per_commit
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped = False
        self.jobs = 0
        self.commits = 0
        """Jobs run and transactions committed so far: many jobs per commit means writes batch."""
        self._connection = _connect(path)
        self._connection.execute("PRAGMA wal_autocheckpoint = 0")  # the checkpointer's job
        self._checkpointer = _Checkpointer(path)
        self._unchecked_bytes = 0
        self._thread = threading.Thread(target=self._run, name="relight-sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, job: _Job[Any]) -> None:
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

    def _commit(self, jobs: list[_Job[Any]]) -> None:
        conn = self._connection
        outcomes: list[tuple[_Job[Any], tuple[Any, bool] | None, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                tx = _Tx(conn)
                conn.execute("SAVEPOINT job")
                try:
                    result = job.fn(tx)
                except Exception as error:
                    conn.execute("ROLLBACK TO job")
                    outcomes.append((job, None, self._as_store_error(error)))
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
            failure = self._as_store_error(error)
            outcomes = [(job, None, failure) for job in jobs]
        for job, result, error in outcomes:
            job.settle(result, error)

    def _as_store_error(self, error: Exception) -> Exception:
        if isinstance(error, sqlite3.Error):
            return StoreError(f"could not write to the SQLite store at {str(self._path)!r}: {error}")
        return error


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
        conn = _connect(self._path)
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


# -- rows and models (run on the writer's or a reader's connection) ----------------------------


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA synchronous = NORMAL")  # in WAL mode: a commit survives the process being killed
    return conn


def _find_rollout(conn: sqlite3.Connection, rollout_id: str) -> Rollout | None:
    row = conn.execute("SELECT data FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone()
    return None if row is None else Rollout.model_validate_json(row[0])


def _get_rollout(conn: sqlite3.Connection, rollout_id: str) -> Rollout:
    rollout = _find_rollout(conn, rollout_id)
    if rollout is None:
        raise _rules.rollout_not_found(rollout_id)
    return rollout


def _require_attempt(conn: sqlite3.Connection, rollout_id: str, attempt_id: str) -> None:
    """Raise NotFoundError unless the attempt exists (a cheap check: nothing is parsed)."""
    query = "SELECT 1 FROM attempts WHERE rollout_id = ? AND attempt_id = ?"
    if conn.execute(query, (rollout_id, attempt_id)).fetchone() is None:
        if conn.execute("SELECT 1 FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone() is None:
            raise _rules.rollout_not_found(rollout_id)
        raise _rules.attempt_not_found(rollout_id, attempt_id)


def _check_repeats(conn: sqlite3.Connection, rows: list[tuple[int, str, str, str, str]], spans: list[Span]) -> None:
    """Raise InvalidStateError if a span that was not inserted (its id was taken) differs from the stored one."""
    for (seq, rollout_id, attempt_id, span_id, _), span in zip(rows, spans, strict=True):
        (stored_seq, data) = conn.execute(
            "SELECT sequence_id, data FROM spans WHERE rollout_id = ? AND attempt_id = ? AND span_id = ?",
            (rollout_id, attempt_id, span_id),
        ).fetchone()
        if stored_seq != seq and not _rules.same_span(Span.model_validate_json(data), span):
            raise _rules.conflicting_span(span)


def _get_attempt(conn: sqlite3.Connection, rollout_id: str, attempt_id: str) -> Attempt:
    _get_rollout(conn, rollout_id)
    row = conn.execute(
        "SELECT data FROM attempts WHERE rollout_id = ? AND attempt_id = ?", (rollout_id, attempt_id)
    ).fetchone()
    if row is None:
        raise _rules.attempt_not_found(rollout_id, attempt_id)
    return Attempt.model_validate_json(row[0])


def _attempts(conn: sqlite3.Connection, rollout_id: str) -> list[Attempt]:
    rows = conn.execute("SELECT data FROM attempts WHERE rollout_id = ? ORDER BY number", (rollout_id,))
    return [Attempt.model_validate_json(data) for (data,) in rows]


def _next_expiry(conn: sqlite3.Connection) -> float | None:
    (expiry,) = conn.execute("SELECT MIN(lease_expires_at) FROM attempts WHERE status = 'running'").fetchone()
    return expiry


def _save_rollout(tx: _Tx, rollout: Rollout) -> None:
    tx.conn.execute(
        "UPDATE rollouts SET status = ?, data = ? WHERE rollout_id = ?",
        (rollout.status, rollout.model_dump_json(), rollout.rollout_id),
    )
    tx.changed = True


def _save_attempt(tx: _Tx, attempt: Attempt) -> None:
    tx.conn.execute(
        "UPDATE attempts SET status = ?, lease_expires_at = ?, data = ? WHERE rollout_id = ? AND attempt_id = ?",
        (attempt.status, attempt.lease_expires_at, attempt.model_dump_json(), attempt.rollout_id, attempt.attempt_id),
    )


def _store_outcome(tx: _Tx, rollout: Rollout, attempt: Attempt) -> None:
    _save_rollout(tx, rollout)
    _save_attempt(tx, attempt)
    if rollout.status is RolloutStatus.QUEUED:
        _queue(tx, rollout)


def _queue(tx: _Tx, rollout: Rollout) -> None:
    """Put the rollout at the back of the queue."""
    tx.conn.execute("INSERT INTO queue (rollout_id, mode) VALUES (?, ?)", (rollout.rollout_id, rollout.mode))
    tx.changed = True
