"""The built-in store backends, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.errors import ConfigError
from relight.hookspecs import hookimpl


def _open_memory(url: str, **options: Any) -> Any:
    from relight.stores.memory import InMemoryStore

    return InMemoryStore(**options)


def _open_sqlite(url: str, **options: Any) -> Any:
    from relight.stores.sqlite import SqliteStore

    return SqliteStore.from_url(url, **options)


def _open_postgres(url: str, **options: Any) -> Any:
    try:
        from relight.stores.postgres import PostgresStore
    except ImportError as error:
        raise ConfigError(f"the PostgreSQL store needs psycopg ({error}): pip install 'relight[postgres]'") from error
    return PostgresStore.from_url(url, **options)


def _open_http(url: str, **options: Any) -> Any:
    from relight.stores.http import HttpStore

    return HttpStore(url, **options)


@hookimpl
def relight_register_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("memory", _open_memory)
    register("sqlite", _open_sqlite)
    register("postgresql", _open_postgres)
    register("postgres", _open_postgres)
    register("http", _open_http)
    register("https", _open_http)
