"""The summary list's SQL, written once and rendered for SQLite and PostgreSQL.

A filter is one table of (field, column, operator) triples (:data:`_COMPARED`), a list of statuses
and a role test, rendered with the dialect's parameter mark. Roles differ: PostgreSQL tests its
jsonb column (``?|``, on a GIN index); SQLite keeps a (seq, role) table indexed by role, which a
filter by one role walks newest first, joined to the summaries, so the page and the count read only
that role's rows (several roles: an ``IN`` over the same table). :func:`page_plan` is a page's queries
in order, written without a connection: a generator that yields each statement and takes its rows
back, so the synchronous SQLite reader and the asynchronous PostgreSQL reader run the same plan.

Pages run newest first by the rollout's ``seq``. The page's rows are picked in a subquery of the
summaries alone, then joined to their rollouts, so skipping an offset walks an index, not rollout
rows. The cursors (``before``, ``after``: rollout ids) make a keyset page, ``seq < …`` or
``seq > …``, which costs the same however deep it lies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from relight.records import Rollout
from relight.stores import _rules
from relight.summaries import RolloutSummary, SpanFacts, SummaryFilter, SummaryPage

__all__ = ["Dialect", "PagePlan", "Rows", "Statement", "page_plan", "run_plan", "run_plan_async"]

Statement = tuple[str, list[Any]]
Rows = list[tuple[Any, ...]]
PagePlan = Generator[Statement, Rows, SummaryPage]
"""Yields statements, is sent each one's rows, returns the page."""

_COMPARED: Final = (
    ("mode", "mode", "="),
    ("group_id", "group_id", "="),
    ("step", "step", "="),
    ("policy_version", "policy_version", "="),
    ("dropped", "dropped", "="),
    ("min_reward", "reward", ">="),
    ("max_reward", "reward", "<="),
    ("min_attempts", "attempts", ">="),
    ("min_calls", "calls", ">="),
    ("min_failed_calls", "failed_calls", ">="),
    ("min_untrainable_calls", "untrainable_calls", ">="),
    ("changed_after", "changed", ">"),
)
"""The filter's plain comparisons: field of :class:`SummaryFilter`, column, operator."""

_FACTS: Final = "m.spans, m.reward, m.roles, m.calls, m.failed_calls, m.untrainable_calls, m.dropped"


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the two SQL stores."""

    mark: str
    """A parameter's placeholder."""
    summaries: str
    rollouts: str
    roles: Callable[[Sequence[str]], Statement]
    """The test that a summary (``m``) has a role span of any of these roles (never called with none)."""
    changed: str
    """A statement whose one row and column is the store's latest change number."""
    roles_of: Callable[[Any], dict[str, int]]
    """The ``roles`` column as a dict."""
    role_rows: str | None = None
    """A table of (seq, role) rows indexed by (role, seq): a filter by one role walks it, newest first."""


@dataclass(frozen=True, slots=True)
class _Query:
    """Where a filter's rows come from (``m``: the summaries) and the test they pass."""

    source: str
    seq: str
    """The column the list is ordered by: ``m.seq``, or the role table's when it drives."""
    condition: str
    values: list[Any]

    def count(self, *more: str) -> str:
        return f"SELECT COUNT(*) FROM {self.source} WHERE {' AND '.join([self.condition, *more])}"


def _query(dialect: Dialect, where: SummaryFilter) -> _Query:
    clauses: list[str] = []
    values: list[Any] = []
    source, seq = f"{dialect.summaries} m", "m.seq"
    if where.roles is not None and len(where.roles) == 1 and dialect.role_rows is not None:
        source, seq = f"{dialect.role_rows} x CROSS JOIN {source} ON m.seq = x.seq", "x.seq"  # CROSS: x drives
        clauses.append(f"x.role = {dialect.mark}")
        values += where.roles
    elif where.roles is not None:
        clause, roles = dialect.roles(where.roles) if where.roles else ("1 = 0", [])
        clauses.append(clause)
        values += roles
    if where.statuses is not None:
        marks = ", ".join([dialect.mark] * len(where.statuses))
        clauses.append(f"m.status IN ({marks})" if where.statuses else "1 = 0")
        values += [status.value for status in where.statuses]
    for field, column, operator in _COMPARED:
        value = getattr(where, field)
        if value is not None:
            clauses.append(f"m.{column} {operator} {dialect.mark}")
            values.append(value.value if isinstance(value, Enum) else value)
    return _Query(source, seq, " AND ".join(clauses) or "1 = 1", values)


def _seq_of(dialect: Dialect, rollout_id: str, field: str) -> Generator[Statement, Rows, int]:
    rows = yield (f"SELECT seq FROM {dialect.summaries} WHERE rollout_id = {dialect.mark}", [rollout_id])
    if not rows:
        raise _rules.cursor_not_found(field, rollout_id)
    return int(rows[0][0])


def page_plan(dialect: Dialect, where: SummaryFilter, limit: int, offset: int) -> PagePlan:
    """One page of the summaries that pass ``where``: how many do, the rows, where the page begins."""
    mark = dialect.mark
    query = _query(dialect, where)
    seq = query.seq
    bounds: list[str] = []
    bound_values: list[Any] = []
    older_than = newer_than = None
    if where.before is not None:
        older_than = yield from _seq_of(dialect, where.before, "before")
        bounds.append(f"{seq} < {mark}")
        bound_values.append(older_than)
    if where.after is not None:
        newer_than = yield from _seq_of(dialect, where.after, "after")
        bounds.append(f"{seq} > {mark}")
        bound_values.append(newer_than)
    counted = yield (query.count(), query.values)
    total = int(counted[0][0])
    if where.changed_after is not None:
        inner = outer = "m.changed"
    else:  # a page after a cursor is the rows nearest above it: read upwards, then shown newest first
        direction = "" if newer_than is not None else " DESC"
        inner, outer = seq + direction, "m.seq" + direction
    rows = yield (
        f"SELECT r.data, {_FACTS}, m.changed, m.seq FROM (SELECT m.* FROM {query.source} "
        f"WHERE {' AND '.join([query.condition, *bounds])} ORDER BY {inner} LIMIT {mark} OFFSET {mark}) m "
        f"JOIN {dialect.rollouts} r ON r.seq = m.seq ORDER BY {outer}",
        [*query.values, *bound_values, limit, offset],
    )
    if newer_than is not None:
        rows.reverse()
    if older_than is None and newer_than is None:
        position = offset
    elif rows:
        above = yield (query.count(f"{seq} > {mark}"), [*query.values, rows[0][-1]])
        position = int(above[0][0])
    else:  # nothing older than the cursor: the list's end; nothing newer: its top
        position = total if newer_than is None else 0
    (changed,), *_ = yield (dialect.changed, [])
    return SummaryPage(
        total=total, offset=position, rows=[_summary(dialect, row) for row in rows], changed=int(changed or 0)
    )


def _summary(dialect: Dialect, row: Sequence[Any]) -> RolloutSummary:
    data, spans, reward, roles, calls, failed, untrainable, dropped, changed, _ = row
    facts = SpanFacts(spans, reward, Counter[str](dialect.roles_of(roles)), calls, failed, untrainable, dropped)
    return RolloutSummary.of(Rollout.model_validate_json(data), facts, changed)


def run_plan(plan: PagePlan, run: Callable[[Statement], Rows]) -> SummaryPage:
    """Run ``plan``'s statements with ``run`` (one connection, one read transaction) and return its page."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(run(statement))
    except StopIteration as done:
        return done.value


async def run_plan_async(plan: PagePlan, run: Callable[[Statement], Awaitable[Rows]]) -> SummaryPage:
    """:func:`run_plan` with an asynchronous ``run``."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(await run(statement))
    except StopIteration as done:
        return done.value
