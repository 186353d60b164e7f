"""The SQLite store's rollout summaries: a table kept in the writer's transactions, and its one query.

One row per rollout (``seq`` is the rollout's own), indexed for the list's filters; ``roles`` is the
JSON object of role span counts, searched for ``"<role>":``. The ``summaries`` counter holds the
latest change number, and its presence marks a file whose summaries are complete: a file made
before summaries existed is filled from its rollouts and spans once, when first opened
(:func:`migrate`), under the write lock so two processes never do it twice.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from relight.models import Rollout, Span
from relight.summaries import RolloutSummary, SpanFacts, SummaryFilter, SummaryPage, step_of

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

_FACTS = "spans, reward, roles, calls, failed_calls, untrainable_calls, dropped"


def migrate(conn: sqlite3.Connection) -> None:
    """Create the summaries table; fill it from the rollouts and spans when the file has none yet."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT 1 FROM counters WHERE name = 'summaries'").fetchone() is None:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            _backfill(conn)
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


def add_spans(conn: sqlite3.Connection, spans: Sequence[Span]) -> None:
    """Count spans just stored (none of them repeats) into the summaries of their rollouts' latest attempts."""
    by_attempt: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        by_attempt.setdefault((span.rollout_id, span.attempt_id), []).append(span)
    for (rollout_id, attempt_id), group in by_attempt.items():
        row = conn.execute(f"SELECT attempts, {_FACTS} FROM summaries WHERE rollout_id = ?", (rollout_id,)).fetchone()
        if row is None or attempt_id != f"{rollout_id}-a{row[0]}":
            continue  # spans of an attempt that no longer counts
        facts = _facts_of_row(row[1:]).merged(SpanFacts.of(group))
        conn.execute(
            f"UPDATE summaries SET ({_FACTS}) = (?, ?, ?, ?, ?, ?, ?), changed = ? WHERE rollout_id = ?",
            (*_facts_row(facts), _next_change(conn), rollout_id),
        )


def _facts_of_row(row: Sequence[Any]) -> SpanFacts:
    spans, reward, roles, calls, failed, untrainable, dropped = row
    return SpanFacts(spans, reward, Counter[str](json.loads(roles)), calls, failed, untrainable, dropped)


# -- the list (a reader's connection) ------------------------------------------------------------


def page(conn: sqlite3.Connection, where: SummaryFilter, limit: int, offset: int) -> SummaryPage:
    """One page of the summaries that pass ``where``, and how many do."""
    clauses, values = _where(where)
    condition = " AND ".join(clauses) or "1"
    order = "m.changed" if where.changed_after is not None else "m.seq DESC"
    (total,) = conn.execute(f"SELECT COUNT(*) FROM summaries m WHERE {condition}", values).fetchone()
    rows = conn.execute(
        f"SELECT r.data, m.{_FACTS.replace(', ', ', m.')}, m.changed FROM summaries m "
        f"JOIN rollouts r ON r.seq = m.seq WHERE {condition} ORDER BY {order} LIMIT ? OFFSET ?",
        (*values, limit, offset),
    ).fetchall()
    (changed,) = conn.execute("SELECT value FROM counters WHERE name = 'summaries'").fetchone()
    return SummaryPage(
        total=total,
        rows=[
            RolloutSummary.of(Rollout.model_validate_json(data), _facts_of_row(facts), change)
            for data, *facts, change in rows
        ],
        changed=changed,
    )


def _where(where: SummaryFilter) -> tuple[list[str], list[object]]:
    clauses: list[str] = []
    values: list[object] = []

    def add(clause: str, *args: object) -> None:
        clauses.append(clause)
        values.extend(args)

    if where.statuses is not None:
        add(f"m.status IN ({', '.join('?' * len(where.statuses))})" if where.statuses else "0", *where.statuses)
    equal = {
        "mode": where.mode,
        "group_id": where.group_id,
        "step": where.step,
        "policy_version": where.policy_version,
        "dropped": where.dropped,
    }
    for column, value in equal.items():
        if value is not None:
            add(f"m.{column} = ?", value)
    at_least = {
        "reward": where.min_reward,
        "attempts": where.min_attempts,
        "calls": where.min_calls,
        "failed_calls": where.min_failed_calls,
        "untrainable_calls": where.min_untrainable_calls,
    }
    for column, value in at_least.items():
        if value is not None:
            add(f"m.{column} >= ?", value)
    if where.max_reward is not None:
        add("m.reward <= ?", where.max_reward)
    if where.changed_after is not None:
        add("m.changed > ?", where.changed_after)
    if where.roles is not None:
        needles = [json.dumps(role) + ":" for role in where.roles]
        add("(" + " OR ".join("instr(m.roles, ?) > 0" for _ in needles) + ")" if needles else "0", *needles)
    return clauses, values
