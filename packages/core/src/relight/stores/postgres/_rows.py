"""Rows of the PostgreSQL store: reading and writing rollouts, attempts and the queue on one connection.

Each helper runs inside the caller's transaction; ``lock=True`` takes the row lock (``FOR UPDATE``).
Locks are taken in one order everywhere (queue row, rollout, attempt), so writers do not deadlock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg.rows import TupleRow

from relight.records import Attempt, AttemptStatus, Rollout, RolloutStatus, Span
from relight.stores import _rules
from relight.stores.postgres import _summaries
from relight.stores.postgres._conn import Conn


@dataclass(slots=True)
class Tx:
    """One try of a transaction: its connection, whether it changed a rollout's state, whether it is a retry."""

    conn: Conn
    retry: bool
    changed: bool = False


async def one(
    conn: Conn, query: LiteralString, params: Sequence[Any] | Mapping[str, Any] | None = None
) -> TupleRow | None:
    return await (await conn.execute(query, params)).fetchone()


async def find_rollout(conn: Conn, rollout_id: str, *, lock: bool = False) -> Rollout | None:
    query = "SELECT data FROM relight_rollouts WHERE rollout_id = %s" + (" FOR UPDATE" if lock else "")
    row = await one(conn, query, (rollout_id,))
    return None if row is None else Rollout.model_validate_json(row[0])


async def get_rollout(conn: Conn, rollout_id: str, *, lock: bool = False) -> Rollout:
    rollout = await find_rollout(conn, rollout_id, lock=lock)
    if rollout is None:
        raise _rules.rollout_not_found(rollout_id)
    return rollout


async def get_attempt(conn: Conn, rollout_id: str, attempt_id: str, *, lock: bool = False) -> Attempt:
    query = "SELECT data FROM relight_attempts WHERE rollout_id = %s AND attempt_id = %s" + (
        " FOR UPDATE" if lock else ""
    )
    row = await one(conn, query, (rollout_id, attempt_id))
    if row is None:
        await get_rollout(conn, rollout_id)
        raise _rules.attempt_not_found(rollout_id, attempt_id)
    return Attempt.model_validate_json(row[0])


async def attempts(conn: Conn, rollout_id: str, *, lock: bool = False) -> list[Attempt]:
    query = "SELECT data FROM relight_attempts WHERE rollout_id = %s ORDER BY number" + (" FOR UPDATE" if lock else "")
    rows = await (await conn.execute(query, (rollout_id,))).fetchall()
    return [Attempt.model_validate_json(data) for (data,) in rows]


async def require_attempts(conn: Conn, attempts: Sequence[tuple[str, str]]) -> None:
    """Raise NotFoundError for the first of ``(rollout_id, attempt_id)`` that does not exist."""
    rollout_ids, attempt_ids = [r for r, _ in attempts], [a for _, a in attempts]
    rows = await (
        await conn.execute(
            "SELECT rollout_id, attempt_id FROM relight_attempts "
            "WHERE (rollout_id, attempt_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
            (rollout_ids, attempt_ids),
        )
    ).fetchall()
    found = set(rows)
    for rollout_id, attempt_id in attempts:
        if (rollout_id, attempt_id) not in found:
            await get_rollout(conn, rollout_id)
            raise _rules.attempt_not_found(rollout_id, attempt_id)


async def check_repeats(conn: Conn, spans: Sequence[Span], columns: Sequence[list[str]]) -> None:
    """Raise InvalidStateError if a sent span whose id was already taken differs from the stored one."""
    rows = await (
        await conn.execute(
            "SELECT rollout_id, attempt_id, span_id, data FROM relight_spans WHERE (rollout_id, attempt_id, span_id) "
            "IN (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
            columns[:3],
        )
    ).fetchall()
    stored = {(r, a, s): data for r, a, s, data in rows}
    for span in spans:
        data = stored[span.rollout_id, span.attempt_id, span.span_id]
        if not _rules.same_span(Span.model_validate_json(data), span):
            raise _rules.conflicting_span(span)


def inserted(spans: Sequence[Span], added: Sequence[TupleRow]) -> list[Span]:
    """The spans whose keys an ``INSERT … RETURNING rollout_id, attempt_id, span_id`` returned (each once)."""
    fresh = set(added)
    kept: list[Span] = []
    for span in spans:  # a span sent twice in one batch was inserted once
        if (key := (span.rollout_id, span.attempt_id, span.span_id)) in fresh:
            fresh.remove(key)
            kept.append(span)
    return kept


def as_of(attempt: Attempt, now: float) -> Attempt:
    """The attempt as the store sees it at ``now``: a running one whose lease has run out has expired."""
    if attempt.status is AttemptStatus.RUNNING and attempt.lease_expires_at <= now:
        return attempt.model_copy(update={"status": AttemptStatus.EXPIRED})
    return attempt


async def next_expiry(conn: Conn) -> float | None:
    row = await one(conn, "SELECT min(lease_expires_at) FROM relight_attempts WHERE status = 'running'")
    return None if row is None else row[0]


async def insert_attempt(tx: Tx, attempt: Attempt) -> None:
    await tx.conn.execute(
        "INSERT INTO relight_attempts (rollout_id, attempt_id, number, status, lease_expires_at, data) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (
            attempt.rollout_id,
            attempt.attempt_id,
            attempt.number,
            attempt.status,
            attempt.lease_expires_at,
            attempt.model_dump_json(),
        ),
    )


async def save_rollout(tx: Tx, rollout: Rollout) -> None:
    await tx.conn.execute(
        "UPDATE relight_rollouts SET status = %s, data = %s WHERE rollout_id = %s",
        (rollout.status, rollout.model_dump_json(), rollout.rollout_id),
    )
    await _summaries.save(tx.conn, rollout)
    tx.changed = True


async def save_attempt(tx: Tx, attempt: Attempt) -> None:
    await tx.conn.execute(
        "UPDATE relight_attempts SET status = %s, lease_expires_at = %s, data = %s "
        "WHERE rollout_id = %s AND attempt_id = %s",
        (attempt.status, attempt.lease_expires_at, attempt.model_dump_json(), attempt.rollout_id, attempt.attempt_id),
    )


async def store_outcome(tx: Tx, rollout: Rollout, attempt: Attempt) -> None:
    await save_rollout(tx, rollout)
    await save_attempt(tx, attempt)
    if rollout.status is RolloutStatus.QUEUED:
        await queue(tx, rollout)


async def queue(tx: Tx, rollout: Rollout) -> None:
    """Put the rollout at the back of the queue."""
    await tx.conn.execute(
        "INSERT INTO relight_queue (rollout_id, mode) VALUES (%s, %s)", (rollout.rollout_id, rollout.mode)
    )
    tx.changed = True
