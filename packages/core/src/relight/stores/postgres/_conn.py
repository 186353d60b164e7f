"""The connection type every PostgreSQL helper takes: psycopg's async connection with tuple rows."""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

Conn = AsyncConnection[TupleRow]
