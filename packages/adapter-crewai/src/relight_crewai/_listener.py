"""CrewAI event-bus handlers that turn LLM calls and tool uses into relight's role and tool spans.

The bus runs synchronous handlers on a thread pool, each in a copy of the emitting thread's context:
the rollout attempt (a context variable) is the emitter's, but a call's start and end handlers may
run in either order. So each start waits for its end (or the end for its start), and whichever
handler comes second records one span from the first event's timestamp to the second's.

Those handlers run too late and elsewhere to name a call's role to the gateway as the call is made;
CrewAI's ``before_llm_call`` hooks run in the agent's own context just before each call, so one
names the agent's role there (:mod:`relight.tracing.request_role`) and an ``after_llm_call`` hook stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from crewai.events import (
    LLMCallCompletedEvent,
    LLMCallFailedEvent,
    LLMCallStartedEvent,
    ToolUsageErrorEvent,
    ToolUsageFinishedEvent,
    ToolUsageStartedEvent,
    crewai_event_bus,
)
from crewai.events.base_events import BaseEvent
from crewai.hooks.llm_hooks import (
    LLMCallHookContext,
    register_after_llm_call_hook,
    register_before_llm_call_hook,
    unregister_after_llm_call_hook,
    unregister_before_llm_call_hook,
)
from opentelemetry.trace import Status, StatusCode

from relight.tracing.agent_spans import end_role_span, end_tool_span, start_role_span, start_tool_span
from relight.tracing.context import current_attempt
from relight.tracing.instrumentation import guarded
from relight.tracing.request_role import call_ended, call_starts

__all__ = ["EventListener"]

_LLMEvent = LLMCallStartedEvent | LLMCallCompletedEvent | LLMCallFailedEvent
_ToolEvent = ToolUsageStartedEvent | ToolUsageFinishedEvent | ToolUsageErrorEvent


class EventListener:
    """Subscribes to the bus on :meth:`attach`, unsubscribes on :meth:`detach`."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._lock = threading.Lock()
        self._waiting: dict[str, BaseEvent] = {}
        self._handlers: list[tuple[type[BaseEvent], Callable[[Any, Any], None]]] = [
            (LLMCallStartedEvent, self._on_llm_event),
            (LLMCallCompletedEvent, self._on_llm_event),
            (LLMCallFailedEvent, self._on_llm_event),
            (ToolUsageStartedEvent, self._on_tool_event),
            (ToolUsageFinishedEvent, self._on_tool_event),
            (ToolUsageErrorEvent, self._on_tool_event),
        ]

    def attach(self) -> None:
        for event_type, handler in self._handlers:
            crewai_event_bus.on(event_type)(handler)
        register_before_llm_call_hook(_name_the_role)
        register_after_llm_call_hook(_stop_naming_the_role)

    def detach(self) -> None:
        for event_type, handler in self._handlers:
            crewai_event_bus.off(event_type, handler)
        unregister_before_llm_call_hook(_name_the_role)
        unregister_after_llm_call_hook(_stop_naming_the_role)
        with self._lock:
            self._waiting.clear()

    @guarded
    def _on_llm_event(self, source: Any, event: _LLMEvent) -> None:
        pair = self._pair(f"llm {event.call_id}", event, started=isinstance(event, LLMCallStartedEvent))
        if pair is not None:
            _record_llm_call(*pair, framework=self.framework)

    @guarded
    def _on_tool_event(self, source: Any, event: _ToolEvent) -> None:
        started = isinstance(event, ToolUsageStartedEvent)
        # The bus links an ending event to its start by event id; tool events carry no call id.
        key = event.event_id if started else event.started_event_id
        pair = self._pair(f"tool {key}", event, started=started)
        if pair is not None:
            _record_tool_use(*pair, framework=self.framework)

    def _pair(self, key: str, event: BaseEvent, *, started: bool) -> tuple[Any, Any] | None:
        """The (start, end) events once both have arrived; None for the first of the two."""
        if current_attempt() is None:
            return None
        with self._lock:
            other = self._waiting.pop(key, None)
            if other is None:
                self._waiting[key] = event
                return None
        return (event, other) if started else (other, event)


def _agent_role(context: LLMCallHookContext) -> str | None:
    role = getattr(context.agent, "role", None)
    return role if isinstance(role, str) and role else None


@guarded
def _name_the_role(context: LLMCallHookContext) -> None:
    """Before a call: its request names the calling agent's role (None returned: the call goes on)."""
    if current_attempt() is not None and (role := _agent_role(context)) is not None:
        call_starts(role)


@guarded
def _stop_naming_the_role(context: LLMCallHookContext) -> None:
    """After a call: later requests of this context no longer name its role (None: the response is kept)."""
    if (role := _agent_role(context)) is not None:
        call_ended(role)


def _record_llm_call(
    start: LLMCallStartedEvent, end: LLMCallCompletedEvent | LLMCallFailedEvent, *, framework: str
) -> None:
    role = end.agent_role or start.agent_role
    if not role:
        return  # a call made outside any agent (``llm.call(...)``) has no role to train
    messages = start.messages
    span = start_role_span(
        role,
        framework=framework,
        run_id=end.call_id,
        input_messages=[{"role": "user", "content": messages}] if isinstance(messages, str) else messages,
        start_time=_nanoseconds(start.timestamp),
    )
    if span is None:
        return
    if isinstance(end, LLMCallFailedEvent):
        span.set_status(Status(StatusCode.ERROR, end.error))
    response_id = end.response_id if isinstance(end, LLMCallCompletedEvent) else None
    end_role_span(span, response_id=response_id, end_time=_nanoseconds(end.timestamp))


def _record_tool_use(
    start: ToolUsageStartedEvent, end: ToolUsageFinishedEvent | ToolUsageErrorEvent, *, framework: str
) -> None:
    span = start_tool_span(
        end.tool_name,
        role=end.agent_role or start.agent_role or "",
        framework=framework,
        run_id=start.event_id,
        arguments=getattr(start, "tool_args", None) or None,
        start_time=_nanoseconds(start.timestamp),
    )
    if span is None:
        return
    failure = end.error if isinstance(end, ToolUsageErrorEvent) else end.failure
    error: BaseException | str | None = failure if isinstance(failure, BaseException) else None
    if failure is not None and error is None:
        error = str(failure)
    result = getattr(end, "output", None) if failure is None else None
    end_tool_span(span, success=failure is None, error=error, result=result, end_time=_nanoseconds(end.timestamp))


def _nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1_000
