"""A SQLite store: the embedded default. One file, no server, and nothing committed is lost to a crash.

Open it with ``relight.open_store("sqlite:///runs/store.db")`` (a relative path, as in SQLAlchemy;
``sqlite:////abs/store.db`` for an absolute one) or ``SqliteStore(path)``.

Writes never run on the caller's thread. They queue for one writer thread
(:mod:`relight.stores.sqlite._writer`), which commits every job that has gathered in a single
transaction, each under its own savepoint so that a job that fails is undone alone. Many small
writes thus cost one commit, and claims stay atomic because every claim is a write transaction:
two workers never get one attempt, even from two processes sharing the file. Reads run on a
connection of the reading thread's own; in WAL mode they see the last commit without waiting for the
writer. Those that find their rows by key (a rollout, its attempts or spans, a waiter's look) run on
the caller's thread; those that may scan many rows (lists, summaries, stats) on a small thread pool.

Waiting is event-driven within the process: a commit that changes a rollout's state wakes its
waiters, and a waiter also wakes at the next lease expiry. A waiter is not woken by another
process's commits until its next wake-up, so processes that wait on each other's work should share
the store through its HTTP server (``relight store serve``).

Each rollout's summary (:mod:`relight.summaries`) is kept in the same transactions, in a table of
its own (:mod:`relight.stores.sqlite._summaries`); a file made before it existed gets it on open.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from pydantic import JsonValue

from relight.errors import ConfigError, StoreError
from relight.records import (
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
from relight.stores.sqlite import _rows, _summaries
from relight.stores.sqlite._writer import Job, Tx, Writer, connect
from relight.summaries import SummaryFilter, SummaryPage

__all__ = ["SqliteStore"]

T = TypeVar("T")


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
            setup = connect(self.path)
            try:
                # Spans are ~2 KB: on 4 KB pages each would fill a page alone; 16 KB pages hold several,
                # which halves the cost of an insert. Only a new file takes it.
                setup.execute("PRAGMA page_size = 16384")
                setup.execute("PRAGMA journal_mode = WAL")
                setup.executescript(_rows.SCHEMA)
                _summaries.migrate(setup)
            finally:
                setup.close()
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"cannot open the SQLite store at {str(self.path)!r}: {error}") from error
        self._writer = Writer(self.path, max_jobs_per_commit)
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="relight-sqlite-read")
        self._reader_local = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        # Rollouts by their stored text: a waiter sees the same unchanged rows at every call.
        self._parse_rollout = functools.lru_cache(maxsize=4096)(Rollout.model_validate_json)

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

        def job(tx: Tx) -> list[Rollout]:
            now = self._clock()
            result: list[Rollout] = []
            for request in requests:
                existing = _rows.find_rollout(tx.conn, request.rollout_id) if request.rollout_id else None
                if existing is not None:
                    result.append(existing)
                    continue
                rollout = _rules.new_rollout(request, now)
                _rows.insert_rollout(tx, rollout)
                _rows.queue(tx, rollout)
                result.append(rollout)
            return result

        return await self._write(job)

    async def record_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        worker_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> list[tuple[Rollout, Attempt]]:
        requests = list(requests)

        def job(tx: Tx) -> list[tuple[Rollout, Attempt]]:
            recorded = _rules.recorded(requests, worker_id, lease_seconds, self._clock())
            for rollout, attempt in recorded:  # a conflict undoes the whole job (its savepoint)
                if _rows.find_rollout(tx.conn, rollout.rollout_id) is not None:
                    raise _rules.rollout_exists(rollout.rollout_id)
                _rows.insert_rollout(tx, rollout)
                _rows.insert_attempt(tx, attempt)
            return recorded

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

        def job(tx: Tx) -> tuple[tuple[Rollout, Attempt] | None, float | None]:
            now = self._reap(tx)
            row = tx.conn.execute(
                "SELECT rollout_id FROM queue WHERE ?1 IS NULL OR mode = ?1 ORDER BY position LIMIT 1", (mode,)
            ).fetchone()
            if row is None:
                return None, _rows.next_expiry(tx.conn)
            tx.conn.execute("DELETE FROM queue WHERE rollout_id = ?", row)
            rollout, attempt = _rules.start_attempt(_rows.get_rollout(tx.conn, row[0]), worker_id, lease_seconds, now)
            _rows.save_rollout(tx, rollout)
            _summaries.new_attempt(tx.conn, rollout.rollout_id)
            _rows.insert_attempt(tx, attempt)
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

        def job(tx: Tx) -> Attempt:
            now = self._reap(tx)
            attempt = _rows.get_attempt(tx.conn, rollout_id, attempt_id)
            _rules.require_running(attempt)
            attempt = attempt.model_copy(update={"lease_expires_at": now + lease_seconds})
            _rows.save_attempt(tx, attempt)
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

        def job(tx: Tx) -> Rollout:
            now = self._reap(tx)
            attempt = _rows.get_attempt(tx.conn, rollout_id, attempt_id)
            rollout, ended = _rules.end_attempt(_rows.get_rollout(tx.conn, rollout_id), attempt, status, error, now)
            _rows.store_outcome(tx, rollout, ended)
            return rollout

        return await self._write(job)

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        rollout_ids = list(rollout_ids)

        def job(tx: Tx) -> list[Rollout]:
            now = self._clock()
            result: list[Rollout] = []
            for rollout_id in rollout_ids:
                found = _rows.get_rollout(tx.conn, rollout_id)
                rollout, cancelled = _rules.cancel_rollout(found, _rows.attempts(tx.conn, rollout_id), now)
                if rollout is not found:
                    _rows.save_rollout(tx, rollout)
                    tx.conn.execute("DELETE FROM queue WHERE rollout_id = ?", (rollout_id,))
                for attempt in cancelled:
                    _rows.save_attempt(tx, attempt)
                result.append(rollout)
            return result

        return await self._write(job)

    async def update_metadata(self, rollout_id: str, metadata: Mapping[str, JsonValue]) -> Rollout:
        def job(tx: Tx) -> Rollout:
            rollout = _rules.with_metadata(_rows.get_rollout(tx.conn, rollout_id), metadata)
            _rows.save_rollout(tx, rollout)
            return rollout

        return await self._write(job)

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        rollout_ids = list(rollout_ids)
        # A look follows every change, so it must cost what changed, not the batch (a trainer waits on
        # hundreds of rollouts while they change hundreds of times a second, and waits again every
        # half second). The first look reads every row; a later one only the rows changed since the
        # look before (each write of a rollout bumps the change number of its summary in the same
        # transaction). A row's text is parsed once across looks and calls (the store's parse cache),
        # and the rollouts still running are counted as they change, not scanned on every look.
        wanted = set(rollout_ids)
        latest: dict[str, Rollout] = {}
        running: set[str] = set()
        looked: int | None = None  # the latest change number at the last look (None before the first)

        def look(conn: sqlite3.Connection) -> float | None:
            nonlocal looked
            (change,) = conn.execute("SELECT value FROM counters WHERE name = 'summaries'").fetchone()
            if looked is None:
                query = "SELECT rollout_id, data FROM rollouts WHERE rollout_id IN (SELECT value FROM json_each(?))"
                rows = conn.execute(query, (json.dumps(rollout_ids),)).fetchall()
            else:
                query = "SELECT m.rollout_id, r.data FROM summaries m JOIN rollouts r USING (seq) WHERE m.changed > ?"
                rows = conn.execute(query, (looked,)).fetchall()
            for rollout_id, data in rows:
                if rollout_id in wanted:
                    rollout = latest[rollout_id] = self._parse_rollout(data)
                    (running.discard if rollout.is_finished else running.add)(rollout_id)
            if looked is None and len(latest) < len(wanted):
                raise _rules.rollout_not_found(next(i for i in rollout_ids if i not in latest))
            looked = change
            return _rows.next_expiry(conn)

        deadline = deadline_after(timeout)
        while True:
            seen = self._changes.version
            next_expiry = self._read_here(look)
            if not running:
                break
            if next_expiry is not None and next_expiry <= self._clock():
                await self._write(self._reap)
                continue
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=next_expiry):
                break
        return [latest[rollout_id] for rollout_id in rollout_ids]

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return self._read_here(lambda conn: _rows.get_rollout(conn, rollout_id))

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

    async def list_summaries(
        self, where: SummaryFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> SummaryPage:
        _rules.check_page(limit, offset)
        return await self._read(lambda conn: _summaries.page(conn, where or SummaryFilter(), limit, offset))

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        def read(conn: sqlite3.Connection) -> list[Attempt]:
            _rows.require_rollout(conn, rollout_id)
            return _rows.attempts(conn, rollout_id)

        return self._read_here(read)

    # -- spans --------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> None:
        if not spans:
            self._check_open()
            return
        spans = list(spans)
        _rules.check_spans(spans)

        def job(tx: Tx) -> None:
            for rollout_id, attempt_id in sorted({(span.rollout_id, span.attempt_id) for span in spans}):
                _rows.require_attempt(tx.conn, rollout_id, attempt_id)
            # Sequence ids are given here, so the stored JSON is the span exactly as queried. A duplicate
            # is ignored and leaves its id unused: ids only need to grow.
            (last,) = tx.conn.execute("SELECT COALESCE(MAX(sequence_id), -1) FROM spans").fetchone()
            rows = [
                (seq, span.rollout_id, span.attempt_id, span.span_id, span_json(span, sequence_id=seq).decode())
                for seq, span in enumerate(spans, start=last + 1)
            ]
            added = tx.conn.executemany(  # its cursor is not kept: see Tx
                "INSERT OR IGNORE INTO spans (sequence_id, rollout_id, attempt_id, span_id, data) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            ).rowcount
            inserted = _rows.check_repeats(tx.conn, rows, spans) if added < len(rows) else spans
            _summaries.add_spans(tx.conn, inserted)
            tx.conn.execute("UPDATE counters SET value = value + ? WHERE name = 'spans'", (added,))
            tx.size = sum(len(data) for *_, data in rows)

        await self._write(job)

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        def read(conn: sqlite3.Connection) -> list[Span]:
            _rows.require_rollout(conn, rollout_id)
            rows = conn.execute(
                "SELECT data FROM spans WHERE rollout_id = ?1 AND (?2 IS NULL OR attempt_id = ?2) ORDER BY sequence_id",
                (rollout_id, attempt_id),
            )
            return [Span.model_validate_json(data) for (data,) in rows]

        return self._read_here(read)

    # -- resources ----------------------------------------------------------------------------

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        items = dict(items)
        _rules.check_resources(items)

        def job(tx: Tx) -> Resources:
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

    async def _write(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in the writer's next transaction; wake waiters if it changed a rollout's state."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[T, bool]] = loop.create_future()
        self._writer.submit(Job(fn, loop, future))
        result, changed = await future
        if changed:
            self._changes.notify()
        return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on a reader thread, inside one read transaction (a consistent snapshot)."""
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._read_now, fn)

    def _read_here(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on this thread, inside one read transaction: for reads that find their rows by key.

        Such a read takes microseconds of SQLite (in WAL mode a reader never waits for the writer),
        less than the hop to a reader thread and back costs; the parsing of what it found holds the
        interpreter lock on any thread.
        """
        self._check_open()
        return self._read_now(fn)

    def _read_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._reader_local, "connection", None)
        if conn is None:
            conn = connect(self.path)
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

    def _reap(self, tx: Tx) -> float:
        """End every attempt whose lease has run out (on the writer thread); returns the time used."""
        now = self._clock()
        rows = tx.conn.execute(
            "SELECT rollout_id, data FROM attempts WHERE status = 'running' AND lease_expires_at <= ?", (now,)
        ).fetchall()
        for rollout_id, data in rows:
            attempt = Attempt.model_validate_json(data)
            rollout, ended = _rules.end_attempt(
                _rows.get_rollout(tx.conn, rollout_id),
                attempt,
                AttemptStatus.EXPIRED,
                _rules.expiry_error(attempt),
                now,
            )
            _rows.store_outcome(tx, rollout, ended)
        return now

    def _shut_down(self) -> None:
        self._writer.stop()
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_connections:
                conn.close()
            self._reader_connections.clear()
