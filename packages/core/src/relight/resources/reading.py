"""What an agent reads of the resources published for its attempt: ``llm.resources`` and :func:`resource`.

A trainer publishes resources (prompt templates, the model's name) as numbered versions in the store
and pins each rollout to one (``Rollout.resources_version``). The runner reads that version from the
store before the agent starts, so a resource travels with its attempt to whichever process or host
runs it, and hands it to the agent twice: as ``llm.resources``, a read-only mapping, and through
:func:`resource` for frameworks whose prompt is built where the ``llm`` handle is out of reach::

    @relight.rollout
    def agent(task, llm):
        system = llm.resources.get("system_prompt", SYSTEM_PROMPT)
        ...

    Agent(name="researcher", instructions=relight.resource("system_prompt", default=SYSTEM_PROMPT), ...)

The agent's own default stands in when nothing was published under the name (or the rollout was
pinned to no version), so the same code runs unchanged outside training. Each name an attempt reads
is recorded once, as an annotation span (``resource <name>``) saying the version it came from or that
the default stood in: dev mode shows it, and an algorithm that changes a resource (APO) can tell an
agent that never reads it from a prompt that changes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal, TypeVar, overload

from pydantic import JsonValue

from relight import semconv
from relight.records import SpanKind
from relight.tracing.context import AttemptRef, attempt_scope
from relight.tracing.hook_failures import hook_failed
from relight.tracing.otel import tracer

__all__ = ["AttemptResources", "ResourceSource", "current_resources", "resource", "resources_scope"]

T = TypeVar("T")

ResourceSource = Literal["published", "default"]
"""Where a value an agent read came from: the attempt's resources version, or the agent's own default."""


class _Missing:
    """No default given."""


_MISSING = _Missing()


class AttemptResources(Mapping[str, JsonValue]):
    """The resources version one attempt runs with, as its agent reads it; each name read is recorded once.

    A plain read-only mapping to the agent (``llm.resources``): ``llm.resources["system_prompt"]``,
    ``.get(name, default)``, ``in``, iteration. Reading a name (a lookup or ``get``) records where its
    value came from; asking whether it is there (``in``) or listing the names records nothing.
    """

    def __init__(self, items: Mapping[str, JsonValue], version: int | None, attempt: AttemptRef | None) -> None:
        self._items = dict(items)
        self._version = version
        self._attempt = attempt
        self._recorded: set[str] = set()
        self._lock = threading.Lock()

    @property
    def version(self) -> int | None:
        """The resources version the attempt was pinned to; None when it was pinned to none."""
        return self._version

    def __getitem__(self, name: str) -> JsonValue:
        try:
            value = self._items[name]
        except KeyError:
            raise KeyError(self._absent(name)) from None
        self._record(name, "published")
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, name: str, default: JsonValue = None) -> JsonValue:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The published value of ``name``, else ``default`` (recorded as the default standing in)."""
        return self.read(name, default)

    def read(self, name: str, default: object = _MISSING) -> JsonValue:
        """The published value of ``name``; ``default`` when there is none, KeyError when there is no default either."""
        if name in self._items:
            self._record(name, "published")
            return self._items[name]
        if isinstance(default, _Missing):
            raise KeyError(self._absent(name))
        self._record(name, "default")
        return default  # pyright: ignore[reportReturnType]  # the caller's default, returned as given

    def _absent(self, name: str) -> str:
        where = (
            f"resources version {self._version}" if self._version is not None else "this attempt (no version pinned)"
        )
        held = ", ".join(sorted(self._items)) or "nothing"
        return f"no resource {name!r} in {where}, which holds {held}; give a default for when none is published"

    def _record(self, name: str, source: ResourceSource) -> None:
        """An annotation span of the attempt: which resource was read, from which version. Never raises."""
        with self._lock:
            if name in self._recorded or self._attempt is None:
                return
            self._recorded.add(name)
        try:
            attributes: dict[str, str | int] = {
                semconv.SPAN_KIND: SpanKind.ANNOTATION.value,
                semconv.RESOURCE_NAME: name,
                semconv.RESOURCE_SOURCE: source,
                semconv.ANNOTATION: json.dumps({"resource": name, "version": self._version, "source": source}),
            }
            if self._version is not None:
                attributes[semconv.RESOURCES_VERSION] = self._version
            # Scoped to the attempt here: an agent may read from a thread that did not copy its context.
            with (
                attempt_scope(self._attempt.rollout_id, self._attempt.attempt_id),
                tracer().start_as_current_span(f"resource {name}", attributes=attributes),
            ):
                pass
        except Exception:
            hook_failed("recording a resource read")


_current: ContextVar[AttemptResources | None] = ContextVar("relight_current_resources", default=None)


def current_resources() -> AttemptResources | None:
    """The resources of the attempt the calling code runs under; None outside any rollout."""
    return _current.get()


@contextmanager
def resources_scope(resources: AttemptResources) -> Generator[AttemptResources]:
    """Make ``resources`` what :func:`resource` reads inside the block (runners enter it around the agent)."""
    token = _current.set(resources)
    try:
        yield resources
    finally:
        _current.reset(token)


@overload
def resource(name: str) -> JsonValue: ...
@overload
def resource(name: str, *, default: T) -> T: ...
def resource(name: str, *, default: object = _MISSING) -> object:
    """The value of resource ``name`` in the current attempt's resources version, else ``default``.

    For the one line of a framework agent where its prompt is built: ``instructions=relight.resource(
    "system_prompt", default=SYSTEM_PROMPT)``. Outside a rollout (the agent run on its own) it is the default.

    Raises:
        KeyError: nothing is published under ``name`` and there is no default.
        TypeError: the published value is not of the default's type (a prompt published as a number).
    """
    resources = _current.get()
    if resources is None:
        if isinstance(default, _Missing):
            raise KeyError(f"relight.resource({name!r}) ran outside a rollout and has no default to return")
        return default
    value = resources.read(name, default)
    if not isinstance(default, _Missing) and default is not None and not isinstance(value, type(default)):
        raise TypeError(
            f"resource {name!r} is published as a {type(value).__name__} ({value!r:.80}), but its default is a "
            f"{type(default).__name__}: publish it as a {type(default).__name__}"
        )
    return value
