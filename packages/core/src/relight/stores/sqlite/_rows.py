"""The SQLite store's tables, and the reads and writes of their rows (on the writer's or a reader's connection)."""

from __future__ import annotations

import sqlite3

from relight.records import Attempt, Rollout, RolloutStatus, Span
from relight.stores import _rules
from relight.stores.sqlite import _summaries
from relight.stores.sqlite._writer import Tx

__all__ = [
    "SCHEMA",
    "attempts",
    "check_repeats",
    "find_rollout",
    "get_attempt",
    "get_rollout",
    "insert_attempt",
    "insert_rollout",
    "next_expiry",
    "queue",
    "require_attempt",
    "require_rollout",
    "save_attempt",
    "save_rollout",
    "store_outcome",
]

SCHEMA = """
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


def find_rollout(conn: sqlite3.Connection, rollout_id: str) -> Rollout | None:
    row = conn.execute("SELECT data FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone()
    return None if row is None else Rollout.model_validate_json(row[0])


def get_rollout(conn: sqlite3.Connection, rollout_id: str) -> Rollout:
    rollout = find_rollout(conn, rollout_id)
    if rollout is None:
        raise _rules.rollout_not_found(rollout_id)
    return rollout


def require_rollout(conn: sqlite3.Connection, rollout_id: str) -> None:
    """Raise NotFoundError unless the rollout exists (a cheap check: nothing is parsed)."""
    if conn.execute("SELECT 1 FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone() is None:
        raise _rules.rollout_not_found(rollout_id)


def require_attempt(conn: sqlite3.Connection, rollout_id: str, attempt_id: str) -> None:
    """Raise NotFoundError unless the attempt exists (a cheap check: nothing is parsed)."""
    query = "SELECT 1 FROM attempts WHERE rollout_id = ? AND attempt_id = ?"
    if conn.execute(query, (rollout_id, attempt_id)).fetchone() is None:
        require_rollout(conn, rollout_id)
        raise _rules.attempt_not_found(rollout_id, attempt_id)


def check_repeats(
    conn: sqlite3.Connection, rows: list[tuple[int, str, str, str, str]], spans: list[Span]
) -> list[Span]:
    """The spans inserted; InvalidStateError if one that was not (its id was taken) differs from the stored one."""
    inserted: list[Span] = []
    for (seq, rollout_id, attempt_id, span_id, _), span in zip(rows, spans, strict=True):
        (stored_seq, data) = conn.execute(
            "SELECT sequence_id, data FROM spans WHERE rollout_id = ? AND attempt_id = ? AND span_id = ?",
            (rollout_id, attempt_id, span_id),
        ).fetchone()
        if stored_seq == seq:
            inserted.append(span)
        elif not _rules.same_span(Span.model_validate_json(data), span):
            raise _rules.conflicting_span(span)
    return inserted


def get_attempt(conn: sqlite3.Connection, rollout_id: str, attempt_id: str) -> Attempt:
    get_rollout(conn, rollout_id)
    row = conn.execute(
        "SELECT data FROM attempts WHERE rollout_id = ? AND attempt_id = ?", (rollout_id, attempt_id)
    ).fetchone()
    if row is None:
        raise _rules.attempt_not_found(rollout_id, attempt_id)
    return Attempt.model_validate_json(row[0])


def attempts(conn: sqlite3.Connection, rollout_id: str) -> list[Attempt]:
    rows = conn.execute("SELECT data FROM attempts WHERE rollout_id = ? ORDER BY number", (rollout_id,))
    return [Attempt.model_validate_json(data) for (data,) in rows]


def next_expiry(conn: sqlite3.Connection) -> float | None:
    (expiry,) = conn.execute("SELECT MIN(lease_expires_at) FROM attempts WHERE status = 'running'").fetchone()
    return expiry


def insert_rollout(tx: Tx, rollout: Rollout) -> None:
    """A new rollout and its summary (not its queue entry)."""
    cursor = tx.conn.execute(
        "INSERT INTO rollouts (rollout_id, status, mode, group_id, data) VALUES (?, ?, ?, ?, ?)",
        (rollout.rollout_id, rollout.status, rollout.mode, rollout.group_id, rollout.model_dump_json()),
    )
    _summaries.insert(tx.conn, rollout, cursor.lastrowid or 0)
    tx.changed = True


def insert_attempt(tx: Tx, attempt: Attempt) -> None:
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


def save_rollout(tx: Tx, rollout: Rollout) -> None:
    tx.conn.execute(
        "UPDATE rollouts SET status = ?, data = ? WHERE rollout_id = ?",
        (rollout.status, rollout.model_dump_json(), rollout.rollout_id),
    )
    _summaries.save(tx.conn, rollout)
    tx.changed = True


def save_attempt(tx: Tx, attempt: Attempt) -> None:
    tx.conn.execute(
        "UPDATE attempts SET status = ?, lease_expires_at = ?, data = ? WHERE rollout_id = ? AND attempt_id = ?",
        (attempt.status, attempt.lease_expires_at, attempt.model_dump_json(), attempt.rollout_id, attempt.attempt_id),
    )


def store_outcome(tx: Tx, rollout: Rollout, attempt: Attempt) -> None:
    save_rollout(tx, rollout)
    save_attempt(tx, attempt)
    if rollout.status is RolloutStatus.QUEUED:
        queue(tx, rollout)


def queue(tx: Tx, rollout: Rollout) -> None:
    """Put the rollout at the back of the queue."""
    tx.conn.execute("INSERT INTO queue (rollout_id, mode) VALUES (?, ?)", (rollout.rollout_id, rollout.mode))
    tx.changed = True
