"""The hooks a relight plugin may implement.

A plugin is a module or object with functions marked ``@relight.hookimpl``, announced in its
package's ``pyproject.toml``::

    [project.entry-points.relight]
    my_plugin = "my_package.plugin"

Each ``relight_register_*`` hook receives a ``register`` callback and calls it once per thing it
provides (``register("sqlite", open_sqlite_store)``). Built-in parts register the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("relight")
hookimpl = pluggy.HookimplMarker("relight")


@hookspec
def relight_register_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register store factories by URL scheme.

    ``register("sqlite", factory)`` makes ``relight.open_store("sqlite:///runs/store.db")`` call
    ``factory(url, **options)``, which returns an object satisfying :class:`relight.store.Store`.
    """


@hookspec
def relight_register_adapters(register: Callable[[str, Callable[[], Any]], None]) -> None:
    """Register framework adapters by name (``"langgraph"``).

    The factory takes no arguments and returns an object with idempotent ``instrument()`` and
    ``uninstrument()`` methods; it must import its framework lazily, inside those methods.
    """


@hookspec
def relight_register_credit_assigners(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register credit-assignment strategies by name (``"identical"``, ``"discounted"``)."""


@hookspec
def relight_register_algorithms(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register training algorithms by name (``"grpo"``); the factory returns a ``relight.Algorithm``."""


@hookspec
def relight_register_engines(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register inference engines by name; the factory returns a gateway upstream."""


@hookspec
def relight_register_group_rewards(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register group rewards by name (``"judge"``); the factory returns a ``relight.rewards.GroupReward``.

    A group reward scores a GRPO group's finished rollouts together, before they are trained on.
    """
