"""The SQLite store's rollout summaries: a table kept in the writer's transactions, and its one query.

One row per rollout (``seq`` is the rollout's own), indexed for the list's filters; ``roles`` is the
JSON object of role span counts, and ``summary_roles`` holds one (seq, role) row per role in it,
indexed by role, for the role filter. The ``summaries`` counter holds the latest change number, and
its presence marks a file whose summaries are complete: a file made before summaries existed is
filled from its rollouts and spans once, when first opened (:func:`migrate`), under the write lock
so two processes never do it twice; a file made before the role table gets it from ``roles``.
The list's query is :mod:`relight.stores._summary_sql`'s, rendered for SQLite.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from relight.records import Rollout, Span
from relight.stores._summary_sql import Dialect, page_plan, run_plan
from relight.summaries import SpanFacts, SummaryFilter, SummaryPage, step_of

__all__ = ["add_spans", "insert", "migrate", "new_attempt", "page", "save"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS summaries (
    seq INTEGER PRIMARY KEY,
    rollout_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    group_id TEXT NOT NULL,
    step INTEGER,
    policy_version INTEGER,
    attempts INTEGER NOT NULL,
    spans INTEGER NOT NULL DEFAULT 0,
    reward REAL,
    roles TEXT NOT NULL DEFAULT '{}',
    calls INTEGER NOT NULL DEFAULT 0,
    failed_calls INTEGER NOT NULL DEFAULT 0,
    untrainable_calls INTEGER NOT NULL DEFAULT 0,
    dropped TEXT,
    changed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS summaries_by_status ON summaries (status);
CREATE INDEX IF NOT EXISTS summaries_by_mode ON summaries (mode);
CREATE INDEX IF NOT EXISTS summaries_by_group ON summaries (group_id);
CREATE INDEX IF NOT EXISTS summaries_by_step ON summaries (step);
CREATE INDEX IF NOT EXISTS summaries_by_version ON summaries (policy_version);
CREATE INDEX IF NOT EXISTS summaries_by_reward ON summaries (reward);
CREATE INDEX IF NOT EXISTS summaries_by_change ON summaries (changed);
"""

_ROLES_SCHEMA = """
CREATE TABLE summary_roles (seq INTEGER NOT NULL, role TEXT NOT NULL, PRIMARY KEY (seq, role)) WITHOUT ROWID;
CREATE INDEX summary_roles_by_role ON summary_roles (role, seq);
INSERT INTO summary_roles (seq, role) SELECT m.seq, j.key FROM summaries m, json_each(m.roles) j
"""

_FACTS = "spans, reward, roles, calls, failed_calls, untrainable_calls, dropped"


def migrate(conn: sqlite3.Connection) -> None:
    """Create the summaries and role tables; fill them from the rollouts and spans when the file has none yet."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        filled = conn.execute("SELECT 1 FROM counters WHERE name = 'summaries'").fetchone() is not None
        if not filled:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            _backfill(conn)
        if not filled or conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'summary_roles'").fetchone() is None:
            conn.execute("DROP TABLE IF EXISTS summary_roles")
            for statement in filter(str.strip, _ROLES_SCHEMA.split(";")):
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _backfill(conn: sqlite3.Connection) -> None:
    rows = conn.execute("SELECT seq, data FROM rollouts ORDER BY seq").fetchall()
    conn.executemany(
        "INSERT INTO summaries (seq, rollout_id, status, mode, group_id, step, policy_version, attempts, changed) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (_rollout_row(Rollout.model_validate_json(data), seq) for seq, data in rows),
    )
    spans = conn.execute(
        "SELECT s.data FROM spans s JOIN summaries m ON s.rollout_id = m.rollout_id "
        "AND s.attempt_id = m.rollout_id || '-a' || m.attempts ORDER BY s.rollout_id, s.sequence_id"
    )
    parsed = (Span.model_validate_json(data) for (data,) in spans)
    updates = [
        (*_facts_row(SpanFacts.of(group)), rollout_id)
        for rollout_id, group in groupby(parsed, key=lambda span: span.rollout_id)
    ]
    conn.executemany(f"UPDATE summaries SET ({_FACTS}) = (?, ?, ?, ?, ?, ?, ?) WHERE rollout_id = ?", updates)
    (last,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM summaries").fetchone()
    conn.execute("INSERT INTO counters VALUES ('summaries', ?)", (last,))


def _rollout_row(rollout: Rollout, changed: int) -> tuple[object, ...]:
    return (
        changed,
        rollout.rollout_id,
        rollout.status.value,
        rollout.mode.value,
        rollout.group_id,
        step_of(rollout.metadata),
        rollout.resources_version,
        rollout.attempt_count,
        changed,
    )


def _facts_row(facts: SpanFacts) -> tuple[object, ...]:
    roles = json.dumps(dict(facts.roles), sort_keys=True, separators=(",", ":"))
    return (
        facts.spans,
        facts.reward,
        roles,
        facts.calls,
        facts.failed_calls,
        facts.untrainable_calls,
        facts.dropped,
    )


def _next_change(conn: sqlite3.Connection) -> int:
    (change,) = conn.execute(
        "UPDATE counters SET value = value + 1 WHERE name = 'summaries' RETURNING value"
    ).fetchone()
    return change


# -- kept on write (the writer's connection, inside its transaction) ---------------------------


def insert(conn: sqlite3.Connection, rollout: Rollout, seq: int) -> None:
    """The summary of a rollout just enqueued as row ``seq``."""
    row = _rollout_row(rollout, _next_change(conn))
    conn.execute(
        "INSERT INTO summaries (seq, rollout_id, status, mode, group_id, step, policy_version, attempts, changed) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (seq, *row[1:]),
    )


def save(conn: sqlite3.Connection, rollout: Rollout) -> None:
    """A saved rollout's status and attempt count."""
    conn.execute(
        "UPDATE summaries SET status = ?, attempts = ?, changed = ? WHERE rollout_id = ?",
        (rollout.status.value, rollout.attempt_count, _next_change(conn), rollout.rollout_id),
    )


def new_attempt(conn: sqlite3.Connection, rollout_id: str) -> None:
    """A new attempt began: its spans, none yet, are what the summary counts from now on."""
    conn.execute(
        f"UPDATE summaries SET ({_FACTS}) = (?, ?, ?, ?, ?, ?, ?) WHERE rollout_id = ?",
        (*_facts_row(SpanFacts()), rollout_id),
    )
    conn.execute(
        "DELETE FROM summary_roles WHERE seq = (SELECT seq FROM summaries WHERE rollout_id = ?)", (rollout_id,)
    )


def add_spans(conn: sqlite3.Connection, spans: Sequence[Span]) -> None:
    """Count spans just stored (none of them repeats) into the summaries of their rollouts' latest attempts."""
    by_attempt: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        by_attempt.setdefault((span.rollout_id, span.attempt_id), []).append(span)
    for (rollout_id, attempt_id), group in by_attempt.items():
        row = conn.execute(
            f"SELECT seq, attempts, {_FACTS} FROM summaries WHERE rollout_id = ?", (rollout_id,)
        ).fetchone()
        if row is None or attempt_id != f"{rollout_id}-a{row[1]}":
            continue  # spans of an attempt that no longer counts
        added = SpanFacts.of(group)
        facts = _facts_of_row(row[2:]).merged(added)
        conn.execute(
            f"UPDATE summaries SET ({_FACTS}) = (?, ?, ?, ?, ?, ?, ?), changed = ? WHERE rollout_id = ?",
            (*_facts_row(facts), _next_change(conn), rollout_id),
        )
        conn.executemany(
            "INSERT OR IGNORE INTO summary_roles (seq, role) VALUES (?, ?)", ((row[0], r) for r in added.roles)
        )


def _facts_of_row(row: Sequence[Any]) -> SpanFacts:
    spans, reward, roles, calls, failed, untrainable, dropped = row
    return SpanFacts(spans, reward, Counter[str](json.loads(roles)), calls, failed, untrainable, dropped)


# -- the list (a reader's connection) ------------------------------------------------------------

_DIALECT = Dialect(
    mark="?",
    summaries="summaries",
    rollouts="rollouts",
    roles=lambda roles: (
        f"m.seq IN (SELECT seq FROM summary_roles WHERE role IN ({', '.join('?' * len(roles))}))",
        list(roles),
    ),
    changed="SELECT value FROM counters WHERE name = 'summaries'",
    roles_of=json.loads,
    role_rows="summary_roles",
)


def page(conn: sqlite3.Connection, where: SummaryFilter, limit: int, offset: int) -> SummaryPage:
    """One page of the summaries that pass ``where``, and how many do."""
    return run_plan(page_plan(_DIALECT, where, limit, offset), lambda statement: conn.execute(*statement).fetchall())
