"""The PostgreSQL store's rollout summaries: a table kept in the writers' transactions, and its one query.

Migration 2 (:data:`MIGRATION`) creates the table and fills it from the rollouts and spans already
stored, in SQL, so a database made before summaries existed lists as fast as a new one. Span facts
are added to a row in place (``spans = spans + …``), so concurrent span batches of one rollout
never lose each other's counts. Change numbers come from a sequence: a transaction takes its
number before it commits, so one may commit after another that took a higher number; readers that
follow changes re-read a window behind the highest number they saw. The list's query is
:mod:`relight.stores._summary_sql`'s, rendered for PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from relight.records import Rollout, Span
from relight.stores._summary_sql import Dialect, Rows, Statement, page_plan, run_plan_async
from relight.stores.postgres._conn import Conn
from relight.summaries import SpanFacts, SummaryFilter, SummaryPage, step_of

__all__ = ["MIGRATION", "add_spans", "insert", "new_attempt", "page", "save"]

MIGRATION: Final = """
CREATE SEQUENCE relight_summary_changes;
CREATE TABLE relight_summaries (
    seq bigint PRIMARY KEY,
    rollout_id text NOT NULL UNIQUE,
    status text NOT NULL,
    mode text NOT NULL,
    group_id text NOT NULL,
    step bigint,
    policy_version bigint,
    attempts integer NOT NULL,
    spans integer NOT NULL DEFAULT 0,
    reward double precision,
    roles jsonb NOT NULL DEFAULT '{}',
    calls integer NOT NULL DEFAULT 0,
    failed_calls integer NOT NULL DEFAULT 0,
    untrainable_calls integer NOT NULL DEFAULT 0,
    dropped text,
    changed bigint NOT NULL
);
CREATE INDEX relight_summaries_by_status ON relight_summaries (status);
CREATE INDEX relight_summaries_by_mode ON relight_summaries (mode);
CREATE INDEX relight_summaries_by_group ON relight_summaries (group_id);
CREATE INDEX relight_summaries_by_step ON relight_summaries (step);
CREATE INDEX relight_summaries_by_version ON relight_summaries (policy_version);
CREATE INDEX relight_summaries_by_reward ON relight_summaries (reward);
CREATE INDEX relight_summaries_by_change ON relight_summaries (changed);
CREATE INDEX relight_summaries_by_roles ON relight_summaries USING gin (roles);
INSERT INTO relight_summaries (seq, rollout_id, status, mode, group_id, step, policy_version, attempts, changed)
SELECT seq, rollout_id, status, mode, group_id,
    CASE WHEN jsonb_typeof(d #> '{metadata,step}') = 'number' AND d #>> '{metadata,step}' ~ '^-?[0-9]{1,18}$'
        THEN (d #>> '{metadata,step}')::bigint END,
    (d ->> 'resources_version')::bigint, (d ->> 'attempt_count')::integer, nextval('relight_summary_changes')
FROM (SELECT seq, rollout_id, status, mode, group_id, data::jsonb AS d FROM relight_rollouts ORDER BY seq) AS r;
WITH latest AS (
    SELECT s.rollout_id, s.sequence_id, s.data::jsonb AS d FROM relight_spans s
    JOIN relight_summaries m ON s.rollout_id = m.rollout_id AND s.attempt_id = m.rollout_id || '-a' || m.attempts
), spans AS (
    SELECT rollout_id, sequence_id, d, d -> 'attributes' AS a, d #>> '{attributes,relight.span.kind}' AS kind
    FROM latest
), facts AS (
    SELECT rollout_id, count(*) AS spans,
        sum((a ->> 'relight.reward')::double precision)
            FILTER (WHERE kind = 'reward' AND jsonb_typeof(a -> 'relight.reward') = 'number'
                AND NOT coalesce(
                    jsonb_typeof(a -> 'relight.reward.role') = 'string' AND a ->> 'relight.reward.role' <> '', false
                ))
            AS reward,
        count(*) FILTER (WHERE kind = 'llm') AS calls,
        count(*) FILTER (WHERE kind = 'llm' AND d ->> 'status_code' = 'ERROR') AS failed_calls,
        count(*) FILTER (WHERE kind = 'llm' AND d ->> 'status_code' IS DISTINCT FROM 'ERROR' AND NOT (
            CASE WHEN jsonb_typeof(a -> 'relight.prompt_token_ids') = 'array'
                THEN jsonb_array_length(a -> 'relight.prompt_token_ids') > 0 ELSE false END
            AND jsonb_typeof(a -> 'relight.response_token_ids') IS NOT DISTINCT FROM 'array'
        )) AS untrainable_calls,
        (array_agg(a ->> 'relight.dropped.reason' ORDER BY sequence_id) FILTER (
            WHERE kind = 'annotation' AND d ->> 'name' = 'relight.dropped'
            AND jsonb_typeof(a -> 'relight.dropped.reason') = 'string'
        ))[1] AS dropped
    FROM spans GROUP BY rollout_id
), roles AS (
    SELECT rollout_id, jsonb_object_agg(role, n) AS roles FROM (
        SELECT rollout_id, a ->> 'relight.role' AS role, count(*) AS n FROM spans
        WHERE kind = 'role' AND jsonb_typeof(a -> 'relight.role') IS DISTINCT FROM 'null' AND a ? 'relight.role'
        GROUP BY 1, 2
    ) AS counted GROUP BY rollout_id
)
UPDATE relight_summaries m SET spans = f.spans, reward = f.reward, roles = coalesce(r.roles, '{}'),
    calls = f.calls, failed_calls = f.failed_calls, untrainable_calls = f.untrainable_calls, dropped = f.dropped
FROM facts f LEFT JOIN roles r USING (rollout_id) WHERE m.rollout_id = f.rollout_id;
"""


# -- kept on write (inside the writer's transaction) ---------------------------------------------


async def insert(conn: Conn, rollout: Rollout) -> None:
    """The summary of a rollout just enqueued."""
    await conn.execute(
        "INSERT INTO relight_summaries (seq, rollout_id, status, mode, group_id, step, policy_version, attempts, "
        "changed) SELECT seq, rollout_id, status, mode, group_id, %s, %s, %s, nextval('relight_summary_changes') "
        "FROM relight_rollouts WHERE rollout_id = %s",
        (step_of(rollout.metadata), rollout.resources_version, rollout.attempt_count, rollout.rollout_id),
    )


async def save(conn: Conn, rollout: Rollout) -> None:
    """A saved rollout's status and attempt count."""
    await conn.execute(
        "UPDATE relight_summaries SET status = %s, attempts = %s, changed = nextval('relight_summary_changes') "
        "WHERE rollout_id = %s",
        (rollout.status, rollout.attempt_count, rollout.rollout_id),
    )


async def new_attempt(conn: Conn, rollout: Rollout) -> None:
    """A new attempt began: the rollout's status, and its spans, none yet, are what counts from now on."""
    await conn.execute(
        "UPDATE relight_summaries SET status = %s, attempts = %s, spans = 0, reward = NULL, roles = '{}', calls = 0, "
        "failed_calls = 0, untrainable_calls = 0, dropped = NULL, changed = nextval('relight_summary_changes') "
        "WHERE rollout_id = %s",
        (rollout.status, rollout.attempt_count, rollout.rollout_id),
    )


async def add_spans(conn: Conn, spans: Sequence[Span]) -> None:
    """Add spans just stored (none of them repeats) to the summaries of their rollouts' latest attempts."""
    by_attempt: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        by_attempt.setdefault((span.rollout_id, span.attempt_id), []).append(span)
    for (rollout_id, attempt_id), group in sorted(by_attempt.items()):  # one lock order for every writer
        facts = SpanFacts.of(group)
        await conn.execute(
            "UPDATE relight_summaries SET spans = spans + %(spans)s, "
            "reward = CASE WHEN %(reward)s::float8 IS NULL THEN reward ELSE coalesce(reward, 0) + %(reward)s END, "
            "roles = coalesce((SELECT jsonb_object_agg(key, total) FROM (SELECT key, sum(value::bigint) AS total "
            "FROM (SELECT * FROM jsonb_each_text(roles) UNION ALL SELECT * FROM jsonb_each_text(%(roles)s::jsonb)) "
            "AS both_ GROUP BY key) AS merged), '{}'), "
            "calls = calls + %(calls)s, failed_calls = failed_calls + %(failed)s, "
            "untrainable_calls = untrainable_calls + %(untrainable)s, dropped = coalesce(dropped, %(dropped)s), "
            "changed = nextval('relight_summary_changes') "
            "WHERE rollout_id = %(rollout)s AND %(attempt)s = rollout_id || '-a' || attempts",
            {
                "spans": facts.spans,
                "reward": facts.reward,
                "roles": json.dumps(dict(facts.roles)),
                "calls": facts.calls,
                "failed": facts.failed_calls,
                "untrainable": facts.untrainable_calls,
                "dropped": facts.dropped,
                "rollout": rollout_id,
                "attempt": attempt_id,
            },
        )


# -- the list --------------------------------------------------------------------------------------


_DIALECT = Dialect(
    mark="%s",
    summaries="relight_summaries",
    rollouts="relight_rollouts",
    roles=lambda roles: ("m.roles ?| %s", [list(roles)]),  # the GIN index of migration 2
    changed="SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM relight_summary_changes",
    roles_of=dict,
)


async def page(conn: Conn, where: SummaryFilter, limit: int, offset: int) -> SummaryPage:
    """One page of the summaries that pass ``where``, and how many do (in one snapshot)."""

    async def run(statement: Statement) -> Rows:
        query, values = statement
        return await (await conn.execute(query.encode(), values)).fetchall()

    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return await run_plan_async(page_plan(_DIALECT, where, limit, offset), run)
