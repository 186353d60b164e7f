"""The role of the LLM call being made, carried to the gateway in the request, so the call is served by its
role's policy (several policies, one per role: :mod:`relight.policies`).

The gateway must know a call's role when the call arrives, not after: it chooses the policy that
serves it. The agent's process knows it at that moment, from one of these, first found wins:

1. :func:`role`, a context manager a plain-Python agent wraps its calls in (``with relight.role("writer"):``);
   an adapter's role span does the same for the call it covers when it opens before the call is made
   (:func:`relight.tracing.agent_spans.start_role_span`: LangGraph's callbacks, the Agents SDK's spans);
2. the ``relight.role`` entry of the OpenTelemetry baggage in the current context, for agents that
   already name their parts with OpenTelemetry;
3. a *role source* an adapter added (:func:`add_role_source`): a function that reads the framework's
   own context while the framework makes the call (AutoGen's message handler context).

The role travels as a W3C Baggage list member, ``baggage: relight.role=<percent-encoded role>``, added
by relight to the requests that go to a gateway a runner in this process serves (:func:`install`, which
the runner calls): every ``httpx`` client (the ``openai`` and ``anthropic`` SDKs, and the frameworks
built on them) carries it, in the trainer's process or a runner's. A request without it has no known
role: the gateway serves it with the base model and marks its span ``relight.policy.unrouted``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote, unquote

import httpx
from opentelemetry import baggage as otel_baggage

__all__ = [
    "BAGGAGE_HEADER",
    "BAGGAGE_KEY",
    "add_role_source",
    "call_ended",
    "call_starts",
    "current_call_role",
    "install",
    "remove_role_source",
    "role",
    "role_of_baggage",
    "uninstall",
    "with_role",
]

logger = logging.getLogger(__name__)

BAGGAGE_HEADER = "baggage"
BAGGAGE_KEY = "relight.role"
"""The baggage entry naming the role (``semconv.ROLE``'s name: the same fact)."""

RoleSource = Callable[[], str | None]

_role: ContextVar[str | None] = ContextVar("relight_call_role", default=None)
_sources: list[RoleSource] = []
_gateways: dict[tuple[str, int | None], int] = {}
"""(host, port) of the gateways runners in this process serve, with how many runners: only their requests
carry the role."""
_lock = threading.Lock()
_originals: dict[type, Callable[..., Any]] = {}


@contextmanager
def role(name: str) -> Generator[None]:
    """Name the role of the LLM calls made inside the block, for an agent without a framework adapter.

    The gateway routes each call to its role's policy (``Trainer(policies=...)``) and records the role
    on the call's span, which is then trained as that role's::

        with relight.role("writer"):
            draft = client.chat.completions.create(model=llm.model, messages=...)
    """
    if not isinstance(name, str) or not name:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"role must be a non-empty string, got {name!r}")
    token = _role.set(name)
    try:
        yield
    finally:
        _role.reset(token)


def call_starts(name: str) -> None:
    """An adapter's LLM call of ``name`` is about to be made in this context: its requests name that role."""
    _role.set(name)


def call_ended(name: str) -> None:
    """The call :func:`call_starts` named has ended: later requests of this context no longer name ``name``.

    A no-op where another role has been named since, or in another context than the start's.
    """
    if _role.get() == name:
        _role.set(None)


def add_role_source(source: RoleSource) -> None:
    """Ask ``source`` for the role of calls no :func:`role` block or role span names (an adapter's hook)."""
    with _lock:
        if source not in _sources:
            _sources.append(source)


def remove_role_source(source: RoleSource) -> None:
    with _lock:
        if source in _sources:
            _sources.remove(source)


def current_call_role() -> str | None:
    """The role of a call made now, in this context; None when nothing names one."""
    named = _role.get()
    if named is not None:
        return named
    named = _baggage_role()
    if named is not None:
        return named
    for source in tuple(_sources):
        try:
            named = source()
        except Exception:  # a framework's context read that fails costs the routing, never the call
            logger.debug("relight: a role source failed", exc_info=True)
            continue
        if named:
            return named
    return None


def _baggage_role() -> str | None:
    value = otel_baggage.get_baggage(BAGGAGE_KEY)
    return value if isinstance(value, str) and value else None


def with_role(baggage: str | None, name: str) -> str:
    """A ``baggage`` header value holding ``relight.role=<name>`` (replacing one already there), the rest kept."""
    member = f"{BAGGAGE_KEY}={quote(name, safe='')}"
    if not baggage:
        return member
    kept = [item for item in baggage.split(",") if item.strip() and item.split("=", 1)[0].strip() != BAGGAGE_KEY]
    return ",".join([*kept, member])


def role_of_baggage(baggage: str | None) -> str | None:
    """The role a ``baggage`` header names; None without a ``relight.role`` entry (W3C Baggage: members split
    by ``,``, properties after ``;``, values percent-encoded)."""
    if not baggage or BAGGAGE_KEY not in baggage:
        return None
    for member in baggage.split(","):
        key, equals, value = member.partition("=")
        if equals and key.strip() == BAGGAGE_KEY:
            named = unquote(value.split(";", 1)[0].strip())
            return named or None
    return None


def install(gateway_url: str) -> None:
    """Make this process's ``httpx`` requests to the gateway at ``gateway_url`` name their call's role.

    The runner calls it as it starts (and :func:`uninstall` as it stops). ``httpx.Client.send`` and
    ``httpx.AsyncClient.send`` are wrapped once per process (as OpenTelemetry's httpx instrumentation
    wraps them): a request to another host, or with no role known, goes out untouched.
    """
    key = _origin(gateway_url)
    with _lock:
        _gateways[key] = _gateways.get(key, 0) + 1
        _wrap_httpx()


def uninstall(gateway_url: str) -> None:
    """Undo one :func:`install` of ``gateway_url``; the wrappers go once no gateway is left."""
    key = _origin(gateway_url)
    with _lock:
        if _gateways.get(key, 0) > 1:
            _gateways[key] -= 1
        else:
            _gateways.pop(key, None)
        if not _gateways:
            _unwrap_httpx()


def _origin(url: str) -> tuple[str, int | None]:
    """(host, port) as ``httpx.URL`` gives them, so a request's URL is compared without parsing it again."""
    parsed = httpx.URL(url)
    return parsed.host, parsed.port


def _tag(request: Any) -> None:
    """Add the call's role to ``request`` (an ``httpx.Request``) when it goes to a gateway and a role is known."""
    try:
        url = request.url
        if (url.host, url.port) not in _gateways:
            return
        named = current_call_role()
        if named is not None:
            headers = request.headers
            headers[BAGGAGE_HEADER] = with_role(headers.get(BAGGAGE_HEADER), named)
    except Exception:  # naming the role is a side job: it must never break the agent's call
        logger.debug("relight: could not name the call's role", exc_info=True)


def _wrap_httpx() -> None:
    if _originals:
        return
    sync_send = httpx.Client.send
    async_send = httpx.AsyncClient.send

    @functools.wraps(sync_send)
    def send(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        _tag(request)
        return sync_send(self, request, **kwargs)

    @functools.wraps(async_send)
    async def asend(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        _tag(request)
        return await async_send(self, request, **kwargs)

    _originals[httpx.Client] = sync_send
    _originals[httpx.AsyncClient] = async_send
    httpx.Client.send = send  # type: ignore[method-assign]
    httpx.AsyncClient.send = asend  # type: ignore[method-assign]


def _unwrap_httpx() -> None:
    for owner, original in _originals.items():
        owner.send = original  # type: ignore[attr-defined]
    _originals.clear()
