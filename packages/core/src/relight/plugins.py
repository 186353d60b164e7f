"""The plugin manager and the registries it fills.

Nothing loads at import time: the first call to :func:`plugin_manager` (or anything that needs a
registry, such as :func:`open_store`) registers the built-in plugins and, unless
``RELIGHT_DISABLE_PLUGIN_AUTOLOAD`` is set, the ``relight`` entry points of installed packages.
``RELIGHT_PLUGINS=a,b`` loads only the entry points named ``a`` and ``b``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import pluggy

from relight import hookspecs
from relight.errors import ConfigError, NotFoundError, PluginError
from relight.store import Store

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "open_store",
    "plugin_manager",
    "registry",
    "reset_plugins",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "relight"
BUILTIN_PLUGINS = (
    "relight.stores._plugin",
    "relight.transitions.credit",
    "relight.tracking._plugin",
    "relight.rewards.judge",
)

_lock = threading.RLock()
_manager: pluggy.PluginManager | None = None
_registries: dict[str, Registry] = {}


class Registry:
    """Named factories of one kind (stores, adapters, …) gathered from every plugin."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, factory: Callable[..., Any]) -> None:
        if name in self._factories and self._factories[name] is not factory:
            raise PluginError(f"{self.kind} {name!r} is registered twice")
        self._factories[name] = factory

    def get(self, name: str) -> Callable[..., Any]:
        try:
            return self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise NotFoundError(f"no {self.kind} named {name!r} is registered (known: {known})") from None

    def make(self, name: str, **options: Any) -> Any:
        """What the factory registered as ``name`` makes with ``options``; ConfigError if it takes other options."""
        factory = self.get(name)
        try:
            return factory(**options)
        except TypeError as error:
            raise ConfigError(f"{self.kind} {name!r} does not take the options {sorted(options)}: {error}") from error

    def names(self) -> list[str]:
        return sorted(self._factories)


def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, created with the built-in and installed plugins on first call."""
    global _manager
    with _lock:
        if _manager is None:
            manager = pluggy.PluginManager("relight")
            manager.add_hookspecs(hookspecs)
            for module_name in BUILTIN_PLUGINS:
                manager.register(importlib.import_module(module_name), name=module_name)
            if not os.environ.get("RELIGHT_DISABLE_PLUGIN_AUTOLOAD"):
                _load_entry_points(manager)
            _manager = manager
        return _manager


def _load_entry_points(manager: pluggy.PluginManager) -> None:
    wanted = {n.strip() for n in os.environ.get("RELIGHT_PLUGINS", "").split(",") if n.strip()}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if (wanted and entry_point.name not in wanted) or manager.get_plugin(entry_point.name) is not None:
            continue
        try:
            manager.register(entry_point.load(), name=entry_point.name)
        except Exception as error:
            raise PluginError(
                f"the relight plugin {entry_point.name!r} ({entry_point.value}) failed to load: {error}; "
                "uninstall it or set RELIGHT_DISABLE_PLUGIN_AUTOLOAD=1"
            ) from error


def registry(kind: str) -> Registry:
    """The registry of ``kind``: ``stores``, ``adapters``, ``credit_assigners``, ``loggers``, ``group_rewards``
    or ``algorithms``."""
    with _lock:
        if kind not in _registries:
            hook = getattr(plugin_manager().hook, f"relight_register_{kind}", None)
            if hook is None:
                raise NotFoundError(f"there is no plugin hook for {kind!r}")
            found = Registry(kind.rstrip("s").replace("_", " "))
            # A hook that declares ``lookup`` may build its things on others of the same registry.
            lookup = {"lookup": found.make} if "lookup" in hook.spec.argnames else {}
            hook(register=found.register, **lookup)
            _registries[kind] = found
        return _registries[kind]


def reset_plugins() -> None:
    """Forget the manager and registries, so the next call loads plugins afresh (for tests)."""
    global _manager
    with _lock:
        _manager = None
        _registries.clear()


def open_store(url: str, **options: Any) -> Store:
    """Open a store by URL: ``memory://``, ``sqlite:///path/to/store.db``, ``http://host:port``.

    The scheme picks the factory a plugin registered; options go to it.
    """
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not scheme:
        raise NotFoundError(f"store URL {url!r} has no scheme; use memory://, sqlite:///path or http://host:port")
    store: Store = registry("stores").get(scheme)(url, **options)
    return store
