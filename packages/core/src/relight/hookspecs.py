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
def relight_register_credit_assigners(
    register: Callable[[str, Callable[..., Any]], None], lookup: Callable[..., Any]
) -> None:
    """Register credit-assignment strategies by name (``"identical"``, ``"discounted"``).

    ``lookup(name, **options)`` makes another registered assigner, for a strategy that builds on one
    (``air`` adds tool rewards to a base strategy's credit); a plugin that needs none leaves it out.
    """


@hookspec
def relight_register_loggers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register experiment trackers by name (``"wandb"``), for ``Trainer(loggers=["wandb"])`` and ``RELIGHT_LOGGERS``.

    The factory takes keyword options (none are required) and returns a
    :class:`relight.tracking.ExperimentLogger`; it must import its tracker's client lazily, in ``start``.
    """


@hookspec
def relight_register_algorithms(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register algorithms by name (``"apo"``), for ``relight.plugins.registry("algorithms").make(name, ...)``.

    The factory takes keyword options and returns what ``relight.Trainer(algorithm=...)`` fits: a
    :class:`relight.Algorithm` (it trains weights) or a :class:`relight.training.search.SearchAlgorithm`
    (it improves the resources the agent reads, such as its prompts).
    """


@hookspec
def relight_register_group_rewards(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register group rewards by name (``"judge"``); the factory returns a ``relight.rewards.GroupReward``.

    A group reward scores a GRPO group's finished rollouts together, before they are trained on.
    """


@hookspec
def relight_register_trained_policies(register: Callable[[str, Callable[[], Any]], None]) -> None:
    """Register what serves and exports the policies a training package's runs leave, by the package's import
    name (``register("relight_torch", factory)``): the package whose algorithm a run's ``run.json`` names.

    The factory takes no arguments and returns a :class:`relight.trained.PolicyCheckpoints`; it must import
    its training stack (torch) lazily, inside the methods. ``relight serve`` and ``relight export-model`` use it.
    """
