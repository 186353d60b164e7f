"""The PostgreSQL store's schema and its migrations, applied by relight itself with a version table.

Every change to the schema is a new entry at the end of :data:`MIGRATIONS`, never an edit of an old
one: a database records in ``relight_schema`` the last migration it ran, and :func:`migrate` runs
the ones after it in one transaction (PostgreSQL's DDL is transactional), under an advisory lock so
that processes starting together do not race. A database migrated by a newer relight is refused rather than misread.
"""

from __future__ import annotations

from typing import Final

from relight.errors import StoreError
from relight.stores.postgres._conn import Conn
from relight.stores.postgres._summaries import MIGRATION as SUMMARIES

__all__ = ["CHANNEL", "MIGRATIONS", "SCHEMA_VERSION", "migrate"]

CHANNEL: Final = "relight_changes"
"""The ``LISTEN``/``NOTIFY`` channel on which a commit that changes a rollout's state wakes waiters."""

_LOCK_KEY: Final = 0x72656C6967687400
"""The advisory lock migrations hold ("relight" in hex): one process migrates, the others wait."""

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: rollouts in enqueue order, the queue, attempts with their leases, spans, resources. JSON is
    # kept as text: relight reads and writes whole records, and text costs no parsing on ingest.
    """
    CREATE TABLE relight_rollouts (
        seq bigserial PRIMARY KEY,
        rollout_id text NOT NULL UNIQUE,
        status text NOT NULL,
        mode text NOT NULL,
        group_id text NOT NULL,
        data text NOT NULL
    );
    CREATE INDEX relight_rollouts_by_status ON relight_rollouts (status);
    CREATE INDEX relight_rollouts_by_group ON relight_rollouts (group_id);
    CREATE TABLE relight_queue (
        position bigserial PRIMARY KEY,
        rollout_id text NOT NULL UNIQUE,
        mode text NOT NULL
    );
    CREATE TABLE relight_attempts (
        rollout_id text NOT NULL,
        attempt_id text NOT NULL,
        number integer NOT NULL,
        status text NOT NULL,
        lease_expires_at double precision NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (rollout_id, attempt_id)
    );
    CREATE INDEX relight_running_attempts_by_lease ON relight_attempts (lease_expires_at)
        WHERE status = 'running';
    CREATE TABLE relight_spans (
        sequence_id bigserial PRIMARY KEY,
        rollout_id text NOT NULL,
        attempt_id text NOT NULL,
        span_id text NOT NULL,
        data text NOT NULL,
        UNIQUE (rollout_id, attempt_id, span_id)
    );
    CREATE TABLE relight_resources (version integer PRIMARY KEY, data text NOT NULL);
    -- Span counts in a few rows, so concurrent ingests do not queue on one counter row.
    CREATE TABLE relight_span_counts (shard integer PRIMARY KEY, value bigint NOT NULL);
    """,
    # 2: per-rollout summaries for rollout lists, filled from what is already stored.
    SUMMARIES,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


async def migrate(conn: Conn) -> int:
    """Bring the database up to :data:`SCHEMA_VERSION`; returns the version it was at before."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute("CREATE TABLE IF NOT EXISTS relight_schema (version integer NOT NULL)")
        row = await (await conn.execute("SELECT max(version) FROM relight_schema")).fetchone()
        found = int(row[0] or 0) if row else 0
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store's schema is at version {found}, newer than this relight knows "
                f"({SCHEMA_VERSION}); upgrade relight"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1].encode())
            await conn.execute("INSERT INTO relight_schema (version) VALUES (%s)", (version,))
    return found
