"""The built-in store backends, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl


def _open_memory(url: str, **options: Any) -> Any:
    from relight.stores.memory import InMemoryStore

    return InMemoryStore(**options)


@hookimpl
def relight_register_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("memory", _open_memory)
