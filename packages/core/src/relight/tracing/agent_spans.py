"""Role, tool and handoff spans: how an adapter tells relight which agent made an LLM call, ran a tool
or handed control to another.

The gateway sees every LLM call with its token ids but not which agent made it; the framework
knows the agent but not the token ids. An adapter records one *role span* per LLM call (and one
*tool span* per tool run) inside the rollout attempt; transitions join each role span to the
gateway's LLM span by response id, then by request messages, then by order within the attempt.

Tool spans carry the call's arguments and the tool's result or error, each cut to
:data:`MAX_TOOL_TEXT` characters so a tool that returns a web page cannot bloat the store. A
handoff span (one agent passing control to another) is a span of its own, so a multi-agent
rollout's structure shows in ``relight dev``, ``relight show`` and the dashboard.

Start a span where the framework reports the call starting, in the agent's context, so it is
tagged with the right attempt even when the framework reports the end from elsewhere. Outside a
rollout attempt nothing is recorded and the ``start_*`` functions return None. A role span opened
before its call is made (no ``start_time``) also names the role in the call's request, so the gateway
serves the call by its role's policy (:mod:`relight.tracing.request_role`); ending it stops that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from relight import semconv
from relight.records import SpanKind
from relight.tracing import otel as tracing
from relight.tracing.context import current_attempt
from relight.tracing.request_role import call_ended, call_starts

__all__ = [
    "MAX_TOOL_TEXT",
    "bounded",
    "end_role_span",
    "end_tool_span",
    "record_handoff",
    "start_role_span",
    "start_tool_span",
]

MAX_TOOL_TEXT = 2000
"""Characters of a tool's arguments or result kept on its span; the rest is cut and marked."""


def bounded(value: Any, limit: int = MAX_TOOL_TEXT) -> str:
    """``value`` as text (JSON where it is data), cut to ``limit`` characters with a note of how much was cut."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters]"


def start_role_span(
    role: str,
    *,
    framework: str,
    run_id: str | None = None,
    agent_name: str | None = None,
    input_messages: Sequence[Mapping[str, Any]] | None = None,
    start_time: int | None = None,
) -> Span | None:
    """Open the role span of one LLM call made by ``role`` (a path for nested agents: ``researcher/agent``).

    Args:
        role: the agent or node; what a role filter matches.
        framework: the adapter's framework (``langgraph``).
        run_id: the framework's own id for the call.
        agent_name: the agent's own name; the last part of ``role`` by default.
        input_messages: the request's messages in OpenAI's shape, to join calls that have no response id.
        start_time: nanoseconds since the epoch, when the call began before the framework told us.
    """
    if current_attempt() is None:
        return None
    attributes: dict[str, str] = {
        semconv.SPAN_KIND: SpanKind.ROLE.value,
        semconv.ROLE: role,
        semconv.GEN_AI_AGENT_NAME: agent_name or role.rsplit("/", 1)[-1],
        semconv.FRAMEWORK: framework,
    }
    if run_id is not None:
        attributes[semconv.FRAMEWORK_RUN_ID] = run_id
    if input_messages is not None:
        attributes[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(list(input_messages), default=str)
    if start_time is None:  # opened as the call is made: the call's request names the role to the gateway
        call_starts(role)
    return tracing.tracer().start_span(f"chat {role}", attributes=attributes, start_time=start_time)


def end_role_span(
    span: Span,
    *,
    response_id: str | None = None,
    error: BaseException | None = None,
    end_time: int | None = None,
) -> None:
    """Close a role span with the response id the framework saw (it joins the gateway's span).

    ``end_time`` (nanoseconds since the epoch) is for frameworks that report a call after it ended.
    """
    if response_id:
        span.set_attribute(semconv.GEN_AI_RESPONSE_ID, response_id)
    attributes: Mapping[str, Any] = getattr(span, "attributes", None) or {}
    if isinstance(named := attributes.get(semconv.ROLE), str):
        call_ended(named)
    _end(span, error, end_time)


def start_tool_span(
    tool_name: str,
    *,
    role: str,
    framework: str,
    call_id: str | None = None,
    run_id: str | None = None,
    arguments: Any = None,
    start_time: int | None = None,
) -> Span | None:
    """Open the span of one tool run requested by ``role``'s LLM call ``call_id``, with its ``arguments``."""
    if current_attempt() is None:
        return None
    attributes: dict[str, str] = {
        semconv.SPAN_KIND: SpanKind.TOOL.value,
        semconv.GEN_AI_TOOL_NAME: tool_name,
        semconv.ROLE: role,
        semconv.FRAMEWORK: framework,
    }
    if call_id is not None:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
    if run_id is not None:
        attributes[semconv.FRAMEWORK_RUN_ID] = run_id
    if arguments is not None:
        attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = bounded(arguments)
    return tracing.tracer().start_span(f"execute_tool {tool_name}", attributes=attributes, start_time=start_time)


def end_tool_span(
    span: Span,
    *,
    success: bool,
    error: BaseException | str | None = None,
    result: Any = None,
    end_time: int | None = None,
) -> None:
    """Close a tool span with the tool's ``result`` or ``error``; ``success`` feeds automatic intermediate rewards.

    ``error`` may be the exception or, where the framework reports only text, its message.
    """
    span.set_attribute(semconv.TOOL_SUCCESS, success)
    if result is not None:
        span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, bounded(result))
    if isinstance(error, str):
        span.set_status(Status(StatusCode.ERROR, bounded(error)))
        error = None
    elif not success and error is None:
        span.set_status(Status(StatusCode.ERROR, "the tool failed"))
    _end(span, error, end_time)


def record_handoff(
    from_role: str, to_role: str, *, framework: str, start_time: int | None = None, end_time: int | None = None
) -> None:
    """Record that ``from_role`` handed control to ``to_role`` (a span of its own, kind ``handoff``)."""
    if current_attempt() is None:
        return
    attributes: dict[str, str] = {
        semconv.SPAN_KIND: SpanKind.HANDOFF.value,
        semconv.HANDOFF_FROM: from_role,
        semconv.HANDOFF_TO: to_role,
        semconv.ROLE: from_role,
        semconv.FRAMEWORK: framework,
    }
    span = tracing.tracer().start_span(
        f"handoff {from_role} -> {to_role}", attributes=attributes, start_time=start_time
    )
    span.end(end_time)


def _end(span: Span, error: BaseException | None, end_time: int | None) -> None:
    if error is not None:
        span.set_attribute(semconv.ERROR_TYPE, type(error).__name__)
        span.set_status(Status(StatusCode.ERROR, bounded(str(error))))
    span.end(end_time)
