"""The Agents SDK tracing processor that turns model and function spans into relight's role and tool spans.

The SDK calls a processor synchronously, in the running agent's context, as each of its spans starts
and ends; so the rollout attempt (a context variable) is the right one and our span covers the SDK
span's time exactly. The agent behind a model call is the nearest enclosing ``AgentSpanData``: a
handoff opens the next agent's span, so the role switches with it, and an agent run as another's
tool nests under it (``triage/researcher``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    HandoffSpanData,
    ResponseSpanData,
    Span,
    Trace,
    TracingProcessor,
)
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from relight import semconv
from relight.tracing.agent_spans import (
    bounded,
    end_role_span,
    end_tool_span,
    record_handoff,
    start_role_span,
    start_tool_span,
)
from relight.tracing.instrumentation import guarded

__all__ = ["RelightTracingProcessor"]


class RelightTracingProcessor(TracingProcessor):
    """Records a role span per model call, a tool span per function call (arguments, result or error)
    and a handoff span per handoff, inside rollout attempts.

    ``enabled`` is switched off by ``uninstrument()``: the SDK has no call that removes one processor
    and keeps the others, so ours stays registered and goes quiet.
    """

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.enabled = True
        self._lock = threading.Lock()
        self._roles: dict[str, str | None] = {}
        """SDK span id -> role path of the agent it runs under, for every open SDK span."""
        self._open: dict[str, trace.Span] = {}
        """SDK span id -> our span, for the model and function calls made inside an attempt."""

    def on_trace_start(self, trace: Trace) -> None:
        return None

    def on_trace_end(self, trace: Trace) -> None:
        return None

    @guarded
    def on_span_start(self, span: Span[Any]) -> None:
        data = span.span_data
        with self._lock:
            role = self._roles.get(span.parent_id) if span.parent_id else None
            if isinstance(data, AgentSpanData):
                role = f"{role}/{data.name}" if role else data.name
            self._roles[span.span_id] = role
        if not self.enabled or role is None:
            return
        if isinstance(data, GenerationSpanData | ResponseSpanData):
            opened = start_role_span(role, framework=self.framework, run_id=span.span_id)
        elif isinstance(data, FunctionSpanData):
            opened = start_tool_span(
                data.name, role=role, framework=self.framework, run_id=span.span_id, arguments=data.input
            )
        else:
            return
        if opened is not None:
            with self._lock:
                self._open[span.span_id] = opened

    @guarded
    def on_span_end(self, span: Span[Any]) -> None:
        data = span.span_data
        with self._lock:
            role = self._roles.pop(span.span_id, None)
            opened = self._open.pop(span.span_id, None)
        if isinstance(data, HandoffSpanData) and self.enabled and data.from_agent and data.to_agent:
            # The role path of the agent handing over; the SDK names only the agents themselves.
            base = role.rsplit("/", 1)[0] + "/" if role and "/" in role else ""
            record_handoff(base + data.from_agent, base + data.to_agent, framework=self.framework)
            return
        if opened is None:
            return
        if isinstance(data, FunctionSpanData):
            if data.input:  # the SDK fills the arguments in after the span starts
                opened.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, bounded(data.input))
            error = _error_text(span.error) if span.error is not None else None
            end_tool_span(opened, success=span.error is None, error=error, result=data.output)
            return
        if span.error is not None:
            opened.set_status(Status(StatusCode.ERROR, span.error["message"]))
        if isinstance(data, GenerationSpanData) and data.input:
            # The SDK fills in the request after the span starts; it is what went over the wire.
            opened.set_attribute(semconv.GEN_AI_INPUT_MESSAGES, json.dumps(list(data.input), default=str))
        response_id = data.response.id if isinstance(data, ResponseSpanData) and data.response else None
        end_role_span(opened, response_id=response_id)

    def shutdown(self) -> None:
        return None

    def force_flush(self) -> None:
        return None


def _error_text(error: Any) -> str:
    """The SDK's span error (``{"message": ..., "data": ...}``) as one line of text."""
    message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
    data: Any = error.get("data") if isinstance(error, dict) else None
    return f"{message}: {json.dumps(data, default=str)}" if data else message
