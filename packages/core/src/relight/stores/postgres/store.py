"""A PostgreSQL store: for runs that outgrow one machine, on a database server users already operate.

Open it with ``relight.open_store("postgresql://user@host:5432/db")`` (``postgres://`` too; any libpq
parameter such as ``?sslmode=require`` passes through), usually behind ``relight store serve`` so
that runners need only HTTP. Install the driver with ``pip install 'relight[postgres]'`` (psycopg 3
and its pool). relight creates its tables (``relight_*``) and migrates them itself.

- Claims are atomic across processes and hosts: a claim takes the oldest queue row with
  ``FOR UPDATE SKIP LOCKED``, so concurrent claimers never wait on each other or share an attempt.
- Waiting is event-driven: a commit that changes a rollout's state sends ``NOTIFY``, and every
  store on the database ``LISTEN``s on one connection of its own, so a claim in one process wakes
  when another process enqueues. Nothing polls; a waiter also wakes at the next lease expiry.
- Spans go in as one multi-row ``INSERT … SELECT FROM unnest(…)`` per batch.
- Transient failures (the server restarting, a dropped connection, a deadlock) are retried with
  backoff (``retry``: by default ~30 s of patience, enough for a restart); writes are safe to
  repeat (rollout ids are chosen before the first try, spans are unique by id, a finish that did
  commit is recognised).
- Locks are taken in one order (queue row, rollout, attempt) so writers do not deadlock.

Leases run on the callers' clocks: hosts sharing a store should keep them in sync (NTP).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import JsonValue

from relight._internal.retry import RetryPolicy
from relight.errors import ConfigError
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
from relight.stores.postgres import _rows, _summaries
from relight.stores.postgres._conn import Conn
from relight.stores.postgres._db import Database
from relight.stores.postgres._rows import Tx
from relight.summaries import SummaryFilter, SummaryPage

__all__ = ["PostgresStore"]


_SPAN_COUNT_SHARDS = 16
DEFAULT_RETRY = RetryPolicy(attempts=12, base_seconds=0.05, cap_seconds=5.0)
"""Up to ~30 s of backoff: long enough for PostgreSQL to restart or fail over."""


class PostgresStore:
    """A :class:`relight.store.Store` in a PostgreSQL database.

    Args:
        url: a libpq connection URL (``postgresql://user:password@host:port/db?sslmode=…``).
        clock: wall-clock time for leases and timestamps; tests pass a manual one.
        min_connections / max_connections: the connection pool's size (the listener has its own).
        retry: how transient failures are retried before the call fails with StoreError.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        min_connections: int = 1,
        max_connections: int = 10,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"PostgreSQL store URL {url!r} must start with postgresql:// or postgres://")
        if not 1 <= min_connections <= max_connections:
            raise ConfigError(
                f"need 1 <= min_connections <= max_connections, got {min_connections} and {max_connections}"
            )
        self.url = url
        self._clock = clock
        self._changes = Changes(clock)
        self._db = Database(url, self._changes, sizes=(min_connections, max_connections), retry=retry)
        self._shard = os.getpid() % _SPAN_COUNT_SHARDS

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        return cls(url, **options)

    # -- rollouts -----------------------------------------------------------------------------

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        _rules.check_requests(requests)
        now = self._clock()
        # Ids are chosen once, before the first try, so a retry after a commit whose reply was lost
        # finds the rollouts it made instead of making them twice.
        fresh = [_rules.new_rollout(request, now) for request in requests]

        async def run(tx: Tx) -> list[Rollout]:
            result: list[Rollout] = []
            for rollout in fresh:
                existing = await _rows.find_rollout(tx.conn, rollout.rollout_id)
                if existing is not None:
                    result.append(existing)
                    continue
                await tx.conn.execute(
                    "INSERT INTO relight_rollouts (rollout_id, status, mode, group_id, data) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (rollout.rollout_id, rollout.status, rollout.mode, rollout.group_id, rollout.model_dump_json()),
                )
                await _summaries.insert(tx.conn, rollout)
                await _rows.queue(tx, rollout)
                result.append(rollout)
            return result

        return await self._db.transact(run)

    async def record_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        worker_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> list[tuple[Rollout, Attempt]]:
        self._check_open()
        # Made once, before the first try, so a retry after a commit whose reply was lost recognises them.
        recorded = _rules.recorded(requests, worker_id, lease_seconds, self._clock())

        async def run(tx: Tx) -> list[tuple[Rollout, Attempt]]:
            for rollout, attempt in recorded:
                inserted = await _rows.one(
                    tx.conn,
                    "INSERT INTO relight_rollouts (rollout_id, status, mode, group_id, data) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (rollout_id) DO NOTHING RETURNING seq",
                    (rollout.rollout_id, rollout.status, rollout.mode, rollout.group_id, rollout.model_dump_json()),
                )
                if inserted is None:
                    stored = await _rows.get_rollout(tx.conn, rollout.rollout_id)
                    if tx.retry and _rules.same_record(stored, rollout):
                        continue  # the first try committed; only its reply was lost
                    raise _rules.rollout_exists(rollout.rollout_id)  # the transaction is rolled back whole
                await _summaries.insert(tx.conn, rollout)
                await _rows.insert_attempt(tx, attempt)
            tx.changed = True
            return recorded

        return await self._db.transact(run)

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

        async def run(tx: Tx) -> tuple[tuple[Rollout, Attempt] | None, float | None]:
            now = await self._reap(tx)
            # The oldest queue row no other claimer holds (concurrent claims skip each other's rows),
            # taken off the queue and its rollout locked in one statement.
            row = await _rows.one(
                tx.conn,
                "WITH next AS (DELETE FROM relight_queue WHERE position = (SELECT position FROM relight_queue "
                "WHERE %(mode)s::text IS NULL OR mode = %(mode)s ORDER BY position LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING rollout_id) "
                "SELECT r.data FROM relight_rollouts r JOIN next USING (rollout_id) FOR UPDATE OF r",
                {"mode": mode},
            )
            if row is None:
                return None, await _rows.next_expiry(tx.conn)
            rollout, attempt = _rules.start_attempt(Rollout.model_validate_json(row[0]), worker_id, lease_seconds, now)
            await tx.conn.execute(
                "WITH saved AS (UPDATE relight_rollouts SET status = %s, data = %s WHERE rollout_id = %s) "
                "INSERT INTO relight_attempts (rollout_id, attempt_id, number, status, lease_expires_at, data) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    rollout.status,
                    rollout.model_dump_json(),
                    rollout.rollout_id,
                    attempt.rollout_id,
                    attempt.attempt_id,
                    attempt.number,
                    attempt.status,
                    attempt.lease_expires_at,
                    attempt.model_dump_json(),
                ),
            )
            await _summaries.new_attempt(tx.conn, rollout)
            tx.changed = True
            return (rollout, attempt), None

        deadline = deadline_after(timeout)
        while True:
            seen = self._changes.version
            claimed, next_expiry = await self._db.transact(run)
            if claimed is not None:
                return claimed
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=next_expiry):
                return None

    async def heartbeat(
        self, rollout_id: str, attempt_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Attempt:
        _rules.check_lease_seconds(lease_seconds)
        now = self._clock()

        async def renew(conn: Conn) -> str | None:
            # The usual case in one statement: the attempt runs and its lease has not run out.
            row = await _rows.one(
                conn,
                "UPDATE relight_attempts SET lease_expires_at = %(lease)s, "
                "data = jsonb_set(data::jsonb, '{lease_expires_at}', to_jsonb(%(lease)s::float8))::text "
                "WHERE rollout_id = %(rollout)s AND attempt_id = %(attempt)s AND status = 'running' "
                "AND lease_expires_at > %(now)s RETURNING data",
                {"lease": now + lease_seconds, "rollout": rollout_id, "attempt": attempt_id, "now": now},
            )
            return None if row is None else row[0]

        renewed = await self._db.read(renew)
        if renewed is not None:
            return Attempt.model_validate_json(renewed)

        async def run(tx: Tx) -> Attempt:  # it does not: say why, as the other stores do
            attempt = _rows.as_of(await _rows.get_attempt(tx.conn, rollout_id, attempt_id, lock=True), now)
            _rules.require_running(attempt)
            attempt = attempt.model_copy(update={"lease_expires_at": now + lease_seconds})
            await _rows.save_attempt(tx, attempt)
            return attempt

        return await self._db.transact(run)

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus,
        *,
        error: str | None = None,
    ) -> Rollout:
        _rules.check_client_status(status)

        async def run(tx: Tx) -> Rollout:
            now = self._clock()
            rollout = await _rows.get_rollout(tx.conn, rollout_id, lock=True)
            attempt = await _rows.get_attempt(tx.conn, rollout_id, attempt_id, lock=True)
            if tx.retry and attempt.status is status and attempt.error == error:
                return rollout  # the first try committed; only its reply was lost
            rollout, ended = _rules.end_attempt(rollout, _rows.as_of(attempt, now), status, error, now)
            await _rows.store_outcome(tx, rollout, ended)
            return rollout

        return await self._db.transact(run)

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        rollout_ids = list(rollout_ids)

        async def run(tx: Tx) -> list[Rollout]:
            now = self._clock()
            # Queue rows first, as claims take them, then rollouts in a fixed order: no deadlocks.
            await tx.conn.execute("DELETE FROM relight_queue WHERE rollout_id = ANY(%s)", (rollout_ids,))
            for rollout_id in sorted(set(rollout_ids)):
                await _rows.get_rollout(tx.conn, rollout_id, lock=True)
            result: list[Rollout] = []
            for rollout_id in rollout_ids:
                found = await _rows.get_rollout(tx.conn, rollout_id)
                rollout, cancelled = _rules.cancel_rollout(found, await _rows.attempts(tx.conn, rollout_id), now)
                if rollout is not found:
                    await _rows.save_rollout(tx, rollout)
                for attempt in cancelled:
                    await _rows.save_attempt(tx, attempt)
                result.append(rollout)
            return result

        return await self._db.transact(run)

    async def update_metadata(self, rollout_id: str, metadata: Mapping[str, JsonValue]) -> Rollout:
        async def run(tx: Tx) -> Rollout:
            rollout = _rules.with_metadata(await _rows.get_rollout(tx.conn, rollout_id, lock=True), metadata)
            await _rows.save_rollout(tx, rollout)
            return rollout

        return await self._db.transact(run)

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        rollout_ids = list(rollout_ids)

        async def look(conn: Conn) -> tuple[list[Rollout], float | None]:
            rows = await (
                await conn.execute(
                    "SELECT rollout_id, data, (SELECT min(lease_expires_at) FROM relight_attempts "
                    "WHERE status = 'running') FROM relight_rollouts WHERE rollout_id = ANY(%s)",
                    (rollout_ids,),
                )
            ).fetchall()
            found = {rollout_id: data for rollout_id, data, _ in rows}
            for rollout_id in rollout_ids:
                if rollout_id not in found:
                    raise _rules.rollout_not_found(rollout_id)
            next_expiry = rows[0][2] if rows else None
            return [Rollout.model_validate_json(found[rollout_id]) for rollout_id in rollout_ids], next_expiry

        deadline = deadline_after(timeout)
        while True:
            seen = self._changes.version
            rollouts, next_expiry = await self._db.read(look)
            if all(rollout.is_finished for rollout in rollouts):
                return rollouts
            if next_expiry is not None and next_expiry <= self._clock():
                await self._db.transact(self._reap)
                continue
            if not await self._changes.wait(seen, deadline=deadline, next_expiry=next_expiry):
                return rollouts

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return await self._db.read(lambda conn: _rows.get_rollout(conn, rollout_id))

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

        async def read(conn: Conn) -> list[Rollout]:
            rows = await conn.execute(
                "SELECT data FROM relight_rollouts WHERE (%(status)s::text IS NULL OR status = %(status)s) "
                "AND (%(mode)s::text IS NULL OR mode = %(mode)s) AND (%(group)s::text IS NULL OR group_id = %(group)s) "
                "ORDER BY seq LIMIT %(limit)s OFFSET %(offset)s",
                {"status": status, "mode": mode, "group": group_id, "limit": limit, "offset": offset},
            )
            return [Rollout.model_validate_json(data) async for (data,) in rows]

        return await self._db.read(read)

    async def list_summaries(
        self, where: SummaryFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> SummaryPage:
        _rules.check_page(limit, offset)
        return await self._db.read(lambda conn: _summaries.page(conn, where or SummaryFilter(), limit, offset))

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        async def read(conn: Conn) -> list[Attempt]:
            attempts = await _rows.attempts(conn, rollout_id)
            if not attempts:
                await _rows.get_rollout(conn, rollout_id)
            return attempts

        return await self._db.read(read)

    # -- spans --------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> None:
        self._check_open()
        if not spans:
            return
        _rules.check_spans(spans)
        # Encoded once, outside the transaction; sequence ids come from the table's own sequence
        # in arrival order and are set on the way out.
        columns: tuple[list[str], list[str], list[str], list[str]] = ([], [], [], [])
        for span in spans:
            for column, value in zip(
                columns, (span.rollout_id, span.attempt_id, span.span_id, span_json(span).decode()), strict=True
            ):
                column.append(value)
        attempts = sorted(set(zip(columns[0], columns[1], strict=True)))

        async def run(tx: Tx) -> None:
            await _rows.require_attempts(tx.conn, attempts)
            # The spans and the count they add, in one statement that says how many were new.
            added = await (
                await tx.conn.execute(
                    "WITH added AS (INSERT INTO relight_spans (rollout_id, attempt_id, span_id, data) "
                    "SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]) ON CONFLICT DO NOTHING "
                    "RETURNING rollout_id, attempt_id, span_id), counted AS (INSERT INTO relight_span_counts "
                    "SELECT %s, count(*) FROM added HAVING count(*) > 0 ON CONFLICT (shard) DO UPDATE "
                    "SET value = relight_span_counts.value + excluded.value) SELECT * FROM added",
                    (*columns, self._shard),
                )
            ).fetchall()
            inserted: Sequence[Span] = spans
            if len(added) < len(spans):  # some ids were taken: only a repeat of the same span may be
                await _rows.check_repeats(tx.conn, spans, columns)
                inserted = _rows.inserted(spans, added)
            await _summaries.add_spans(tx.conn, inserted)

        await self._db.transact(run)

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        async def read(conn: Conn) -> list[Span]:
            rows = await (
                await conn.execute(
                    "SELECT sequence_id, data FROM relight_spans WHERE rollout_id = %(rollout)s "
                    "AND (%(attempt)s::text IS NULL OR attempt_id = %(attempt)s) ORDER BY sequence_id",
                    {"rollout": rollout_id, "attempt": attempt_id},
                )
            ).fetchall()
            if not rows:
                await _rows.get_rollout(conn, rollout_id)
            return [
                Span.model_validate_json(data).model_copy(update={"sequence_id": sequence_id})
                for sequence_id, data in rows
            ]

        return await self._db.read(read)

    # -- resources ----------------------------------------------------------------------------

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        items = dict(items)
        _rules.check_resources(items)

        async def run(tx: Tx) -> Resources:
            await tx.conn.execute("LOCK TABLE relight_resources IN EXCLUSIVE MODE")  # one new version at a time
            row = await _rows.one(tx.conn, "SELECT COALESCE(max(version) + 1, 0) FROM relight_resources")
            resources = Resources(version=row[0] if row else 0, items=items, created_at=self._clock())
            await tx.conn.execute(
                "INSERT INTO relight_resources VALUES (%s, %s)", (resources.version, resources.model_dump_json())
            )
            return resources

        return await self._db.transact(run)

    async def get_resources(self, version: int | None = None) -> Resources:
        _rules.check_version(version)

        async def read(conn: Conn) -> Resources:
            row = await _rows.one(
                conn,
                "SELECT data FROM relight_resources "
                "WHERE version = COALESCE(%s, (SELECT max(version) FROM relight_resources))",
                (version,),
            )
            if row is None:
                count = await _rows.one(conn, "SELECT count(*) FROM relight_resources")
                raise _rules.resources_not_found(version, count[0] if count else 0)
            return Resources.model_validate_json(row[0])

        return await self._db.read(read)

    async def stats(self) -> StoreStats:
        async def read(conn: Conn) -> StoreStats:
            async def counts(table: str) -> dict[str, int]:
                query = f"SELECT status, count(*) FROM {table} GROUP BY status".encode()
                return {status: count for status, count in await (await conn.execute(query)).fetchall()}

            spans = await _rows.one(conn, "SELECT COALESCE(sum(value), 0)::bigint FROM relight_span_counts")
            versions = await _rows.one(conn, "SELECT count(*) FROM relight_resources")
            return StoreStats(
                rollouts_by_status=await counts("relight_rollouts"),
                attempts_by_status=await counts("relight_attempts"),
                spans=spans[0] if spans else 0,
                resources_versions=versions[0] if versions else 0,
                extra={"backend": "postgresql", "retries_since_open": self._db.retries},
            )

        return await self._db.read(read)

    async def close(self) -> None:
        await self._db.close()

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._db.closed:
            raise _rules.closed()

    async def _reap(self, tx: Tx) -> float:
        """End every attempt whose lease has run out; returns the time used.

        Rollouts another transaction holds are skipped (it may be finishing them); a later reap takes them.
        """
        now = self._clock()
        expired = await (
            await tx.conn.execute(
                "SELECT rollout_id FROM relight_attempts WHERE status = 'running' AND lease_expires_at <= %s", (now,)
            )
        ).fetchall()
        for (rollout_id,) in expired:
            row = await _rows.one(
                tx.conn, "SELECT data FROM relight_rollouts WHERE rollout_id = %s FOR UPDATE SKIP LOCKED", (rollout_id,)
            )
            if row is None:
                continue
            rollout = Rollout.model_validate_json(row[0])
            for attempt in await _rows.attempts(tx.conn, rollout_id, lock=True):
                if attempt.status is AttemptStatus.RUNNING and attempt.lease_expires_at <= now:
                    rollout, ended = _rules.end_attempt(
                        rollout, attempt, AttemptStatus.EXPIRED, _rules.expiry_error(attempt), now
                    )
                    await _rows.store_outcome(tx, rollout, ended)
        return now
