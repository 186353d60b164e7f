"""Which role made each LLM call: the role the call named on arrival, else its adapter's role span's.

The gateway sees every call with its token ids but not which agent made it; an adapter records one role
span per call (:mod:`relight.tracing.agent_spans`). A call is joined to its role span by response id,
else by equal request messages, else by order (the role span around the call, then the next unmatched
one). A role the call named when it reached the gateway (:mod:`relight.tracing.request_role`) decided
which policy served it, so it wins over any join.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.records import Span

__all__ = ["JoinedCall", "join_roles"]


@dataclass(frozen=True, slots=True)
class JoinedCall:
    """An LLM call and the role that made it (None: no role span and no role named on arrival)."""

    span: Span
    role: str | None


def join_roles(llm_spans: Sequence[Span], role_spans: Sequence[Span]) -> list[JoinedCall]:
    """Each LLM span with the role of its role span: by response id, then request messages, then order."""
    roles: dict[str, str | None] = {}
    unmatched = list(role_spans)

    def pair(llm: Span, role_span: Span) -> None:
        role = role_span.attributes.get(semconv.ROLE)
        roles[llm.span_id] = str(role) if role is not None else None
        unmatched.remove(role_span)

    by_response_id = {
        str(s.attributes[semconv.GEN_AI_RESPONSE_ID]): s
        for s in role_spans
        if s.attributes.get(semconv.GEN_AI_RESPONSE_ID)
    }
    for llm in llm_spans:
        role_span = by_response_id.get(str(llm.attributes.get(semconv.GEN_AI_RESPONSE_ID)))
        if role_span is not None and role_span in unmatched:
            pair(llm, role_span)
    for llm in (s for s in llm_spans if s.span_id not in roles):
        key = _messages_key(llm.attributes.get(semconv.GEN_AI_INPUT_MESSAGES))
        role_span = next(
            (
                r
                for r in unmatched
                if key is not None and _messages_key(r.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)) == key
            ),
            None,
        )
        if role_span is not None:
            pair(llm, role_span)
    for llm in (s for s in llm_spans if s.span_id not in roles):
        around = [r for r in unmatched if r.start_time <= llm.start_time and llm.end_time <= r.end_time]
        if around:
            pair(llm, max(around, key=lambda r: r.start_time))
    for llm in (s for s in llm_spans if s.span_id not in roles):
        if unmatched:
            pair(llm, unmatched[0])
    return [JoinedCall(llm, _arrival_role(llm) or roles.get(llm.span_id)) for llm in llm_spans]


def _arrival_role(llm: Span) -> str | None:
    """The role the call named when it reached the gateway (see :mod:`relight.tracing.request_role`): it decided
    which policy served the call, so it wins over any join."""
    role = llm.attributes.get(semconv.ROLE)
    return role if isinstance(role, str) and role else None


def _messages_key(text: JsonValue | None) -> tuple[tuple[str, str], ...] | None:
    """Request messages reduced to (role, text) pairs, so differently spelled records of one request compare equal."""
    if not isinstance(text, str):
        return None
    try:
        messages: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(messages, list):
        return None
    key: list[tuple[str, str]] = []
    for message in cast(list[Any], messages):
        if not isinstance(message, dict):
            return None
        entry = cast(dict[str, Any], message)
        content: Any = entry.get("content")
        if isinstance(content, list):
            content = "".join(
                str(cast(dict[str, Any], p).get("text", "")) for p in cast(list[Any], content) if isinstance(p, dict)
            )
        key.append((str(entry.get("role", "")), "" if content is None else str(content)))
    return tuple(key)
