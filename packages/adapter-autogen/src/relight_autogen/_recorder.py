"""AutoGen's LLM and tool events, made into relight role and tool spans.

``autogen_core`` logs every model client call on ``autogen_core.EVENT_LOGGER_NAME`` at INFO: an
``LLMCallEvent`` once a call returns (its raw response holds the response id), or an
``LLMStreamStartEvent`` at the first chunk and an ``LLMStreamEndEvent`` at the last. AgentChat logs
an agent's ``ToolCallRequestEvent`` and ``ToolCallExecutionEvent`` at DEBUG on its own event
logger; a handoff is one of those tool calls (``transfer_to_<agent>``), recorded as a handoff span too.
Each event is logged on the agent's task, so the attempt it belongs to is the current one. The call's
request names its role to the gateway from the same context, read as the call is made (:func:`current_role`).
"""

from __future__ import annotations

import logging
import re
import threading
from contextvars import ContextVar
from typing import Any

from autogen_agentchat import EVENT_LOGGER_NAME as AGENTCHAT_EVENT_LOGGER_NAME
from autogen_agentchat.messages import HandoffMessage, ToolCallExecutionEvent, ToolCallRequestEvent
from autogen_core import EVENT_LOGGER_NAME, MessageHandlerContext
from autogen_core.logging import LLMCallEvent, LLMStreamEndEvent, LLMStreamStartEvent
from opentelemetry import trace
from opentelemetry.trace import Span

from relight import semconv
from relight.tracing.agent_spans import end_role_span, end_tool_span, record_handoff, start_role_span, start_tool_span
from relight.tracing.context import AttemptRef, current_attempt
from relight.tracing.instrumentation import guarded
from relight.tracing.request_role import add_role_source, remove_role_source
from relight_autogen._tap import LogTap

__all__ = ["Recorder", "current_role", "role_of"]

FRAMEWORK = "autogen"
_TEAM_SUFFIX = re.compile(r"_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
"""A team names each participant's agent type ``<name>_<team id>``."""

_HANDOFF_PREFIX = "transfer_to_"
"""AgentChat names an ``AssistantAgent``'s handoff tool ``transfer_to_<target>`` (``Handoff(target=...)``)."""

_open_stream: ContextVar[Span | None] = ContextVar("relight_autogen_open_stream", default=None)
"""The role span of the stream the current task is reading (a stream starts and ends on one task)."""


def role_of(agent_id: str | None) -> str:
    """The agent's name: from its id inside a team (``writer_<team id>/<key>``), else from AutoGen's agent span."""
    if agent_id:
        return _TEAM_SUFFIX.sub("", agent_id.split("/", 1)[0])
    attributes: Any = getattr(trace.get_current_span(), "attributes", None) or {}
    name = attributes.get(semconv.GEN_AI_AGENT_NAME)
    return name if isinstance(name, str) and name else "agent"


def current_role() -> str | None:
    """The role of a model call made now: the agent handling a message in a team, else the agent whose
    span is current; None outside any agent. AutoGen reports a call only once it has returned, so this is
    how the call's request names its role to the gateway (:mod:`relight.tracing.request_role`)."""
    if current_attempt() is None:
        return None
    try:
        agent_id: str | None = str(MessageHandlerContext.agent_id())
    except RuntimeError:  # not inside a message handler: a lone agent
        agent_id = None
    if agent_id is None and not getattr(trace.get_current_span(), "attributes", None):
        return None
    return role_of(agent_id)


class Recorder:
    """Taps AutoGen's event loggers while attached."""

    def __init__(self) -> None:
        self._taps = [
            LogTap(EVENT_LOGGER_NAME, logging.INFO, self._on_model_event),
            LogTap(AGENTCHAT_EVENT_LOGGER_NAME, logging.DEBUG, self._on_agent_event),
        ]
        self._tools: dict[tuple[AttemptRef | None, str], Span] = {}
        self._lock = threading.Lock()

    def attach(self) -> None:
        for tap in self._taps:
            tap.attach()
        add_role_source(current_role)

    def detach(self) -> None:
        for tap in self._taps:
            tap.detach()
        remove_role_source(current_role)

    @guarded
    def _on_model_event(self, record: logging.LogRecord) -> None:
        event = record.msg
        if isinstance(event, LLMCallEvent):
            span = self._start_call(event.kwargs)
            if span is not None:
                response = event.kwargs.get("response") or {}
                end_role_span(span, response_id=response.get("id"))
        elif isinstance(event, LLMStreamStartEvent):
            _open_stream.set(self._start_call(event.kwargs))
        elif isinstance(event, LLMStreamEndEvent):
            span = _open_stream.get()
            _open_stream.set(None)
            if span is not None:
                end_role_span(span)

    @guarded
    def _on_agent_event(self, record: logging.LogRecord) -> None:
        event = record.msg
        attempt = current_attempt()
        if isinstance(event, ToolCallRequestEvent):
            for call in event.content:
                span = start_tool_span(
                    call.name, role=event.source, framework=FRAMEWORK, call_id=call.id, arguments=call.arguments
                )
                if span is not None:
                    with self._lock:
                        self._tools[(attempt, call.id)] = span
        elif isinstance(event, ToolCallExecutionEvent):
            for result in event.content:
                with self._lock:
                    span = self._tools.pop((attempt, result.call_id), None)
                if span is not None:
                    if result.is_error:
                        end_tool_span(span, success=False, error=result.content)
                    else:
                        end_tool_span(span, success=True, result=result.content)
                target = result.name.removeprefix(_HANDOFF_PREFIX)
                if not result.is_error and result.name.startswith(_HANDOFF_PREFIX) and target:
                    # AgentChat logs no HandoffMessage: its handoff is this tool call, named after the target.
                    record_handoff(event.source, target, framework=FRAMEWORK)
        elif isinstance(event, HandoffMessage):
            record_handoff(event.source, event.target, framework=FRAMEWORK)

    def _start_call(self, details: dict[str, Any]) -> Span | None:
        return start_role_span(
            role_of(details.get("agent_id")), framework=FRAMEWORK, input_messages=details.get("messages")
        )
