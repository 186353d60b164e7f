"""Switch framework adapters on and off: ``relight.instrument("langgraph")``, ``relight.uninstrument()``.

An adapter is an :class:`Instrumentor` registered through the ``relight_register_adapters`` hook
(see :mod:`relight.hookspecs`). Its ``instrument()`` attaches relight to the framework's own
callback mechanism, so the user's agent code stays as it is; :mod:`relight.tracing.agent_spans` holds what it
records. Writing one::

    class MyFrameworkAdapter(Instrumentor):
        framework = "myframework"

        def _instrument(self) -> None:
            import myframework  # lazily: relight must import without the framework

            myframework.add_listener(self._on_llm_call)

        def _uninstrument(self) -> None: ...

        @guarded
        def _on_llm_call(self, event) -> None: ...  # an error here is logged, never raised into the agent
"""

from __future__ import annotations

import functools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, ParamSpec, Protocol, Self, cast

from relight.plugins import registry
from relight.tracing.hook_failures import hook_failed

__all__ = ["Adapter", "Instrumentor", "guarded", "instrument", "uninstrument"]

logger = logging.getLogger(__name__)

P = ParamSpec("P")


class Adapter(Protocol):
    """What the ``adapters`` registry's factories return."""

    def instrument(self) -> None: ...

    def uninstrument(self) -> None: ...


class Instrumentor(ABC):
    """Base of framework adapters: one instance per class, ``instrument()``/``uninstrument()`` idempotent.

    One instance per class (as in OpenTelemetry's ``BaseInstrumentor``) because a framework has one
    set of global hooks: ``LangGraphAdapter().instrument()`` followed by
    ``relight.instrument("langgraph")`` must still record each call once. So ``__init__`` runs on
    every ``Adapter()`` call: keep state in what ``_instrument`` sets up.
    """

    framework: ClassVar[str]
    """The framework's name, written to every span as ``relight.framework``."""

    _instances: ClassVar[dict[type[Instrumentor], Instrumentor]] = {}
    _creating: ClassVar[threading.Lock] = threading.Lock()
    _lock: threading.RLock
    _instrumented: bool

    def __new__(cls) -> Self:
        with Instrumentor._creating:
            instance = Instrumentor._instances.get(cls)
            if instance is None:
                instance = super().__new__(cls)
                instance._lock = threading.RLock()
                instance._instrumented = False
                Instrumentor._instances[cls] = instance
            return cast(Self, instance)

    @property
    def is_instrumented(self) -> bool:
        return self._instrumented

    def instrument(self) -> None:
        """Start recording the framework's LLM and tool calls; a second call does nothing.

        Raises:
            ImportError: the framework is not installed (the message says what to install).
        """
        with self._lock:
            if not self._instrumented:
                self._instrument()
                self._instrumented = True

    def uninstrument(self) -> None:
        """Stop recording; a second call (or one before ``instrument()``) does nothing."""
        with self._lock:
            if self._instrumented:
                self._uninstrument()
                self._instrumented = False

    @abstractmethod
    def _instrument(self) -> None:
        """Import the framework and attach to its hooks."""

    @abstractmethod
    def _uninstrument(self) -> None:
        """Detach from the framework's hooks."""


def guarded(hook: Callable[P, Any]) -> Callable[P, None]:
    """Wrap a framework callback so that its exceptions are counted and logged once, never reaching the agent.

    Recording is a side job: a bug in it must cost a role tag, not the rollout (:mod:`.hook_failures`).
    """

    @functools.wraps(hook)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except Exception:
            hook_failed(hook.__qualname__)

    return wrapper


def instrument(name: str | None = None) -> list[str]:
    """Instrument the adapter registered as ``name``, or every installed adapter whose framework imports.

    Returns:
        The names of the adapters now instrumented by this call.

    Raises:
        relight.NotFoundError: no adapter is registered as ``name``.
        ImportError: ``name``'s framework is not installed.
    """
    adapters = registry("adapters")
    done: list[str] = []
    for adapter_name in [name] if name is not None else adapters.names():
        adapter = cast(Adapter, adapters.get(adapter_name)())
        try:
            adapter.instrument()
        except ImportError as error:
            if name is not None:
                raise
            logger.info("relight: the %s adapter is not instrumented: %s", adapter_name, error)
            continue
        done.append(adapter_name)
    return done


def uninstrument(name: str | None = None) -> None:
    """Uninstrument the adapter registered as ``name``, or every registered adapter.

    Raises:
        relight.NotFoundError: no adapter is registered as ``name``.
    """
    adapters = registry("adapters")
    for adapter_name in [name] if name is not None else adapters.names():
        cast(Adapter, adapters.get(adapter_name)()).uninstrument()
