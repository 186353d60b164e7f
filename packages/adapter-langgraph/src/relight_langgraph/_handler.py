"""The LangChain callback handler that turns LLM and tool runs into relight role and tool spans.

LangChain pairs each run's start and end by ``run_id``; LangGraph puts the node in the run's
metadata (``langgraph_node``) and, inside subgraphs, the whole path in the checkpoint namespace
(``researcher:<task id>|agent:<task id>``), which becomes the role ``researcher/agent``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook
from opentelemetry.trace import Span

from relight.tracing.agent_spans import end_role_span, end_tool_span, record_handoff, start_role_span, start_tool_span
from relight.tracing.context import AttemptRef, current_attempt
from relight.tracing.instrumentation import guarded

__all__ = ["RelightCallbackHandler", "attach", "detach", "role_of"]

FRAMEWORK = "langgraph"
_MAX_UNCLAIMED_TOOL_CALLS = 10_000
"""Tool calls an LLM asked for but no tool has run yet; the oldest are forgotten beyond this."""


def role_of(metadata: Mapping[str, Any] | None, default: str) -> str:
    """The node path of a run: ``planner``, or ``researcher/agent`` inside the ``researcher`` subgraph."""
    metadata = metadata or {}
    namespace = metadata.get("langgraph_checkpoint_ns")
    if isinstance(namespace, str) and namespace:
        return "/".join(task.split(":", 1)[0] for task in namespace.split("|"))
    node = metadata.get("langgraph_node")
    return node if isinstance(node, str) and node else default


@dataclass(frozen=True, slots=True)
class _Run:
    span: Span
    role: str
    attempt: AttemptRef | None


class RelightCallbackHandler(BaseCallbackHandler):
    """Records every chat model, LLM and tool run of a rollout attempt as a role or tool span."""

    run_inline = True
    """Called on the caller's task in async runs, so spans start in the agent's own context."""

    def __init__(self) -> None:
        self._runs: dict[UUID, _Run] = {}
        self._lock = threading.Lock()
        self._callers: dict[tuple[AttemptRef | None, str], str] = {}
        """(attempt, tool call id) → the role whose LLM call asked for that tool."""
        self._last_roles: dict[AttemptRef, str] = {}
        """attempt → the role of its latest LLM call: a call by another agent node follows an edge to it."""

    @guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start_llm(run_id, metadata, kwargs.get("name") or serialized.get("name"), messages[0])

    @guarded
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start_llm(run_id, metadata, kwargs.get("name") or serialized.get("name"), None)

    @guarded
    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._pop(run_id)
        if run is None:
            return
        response_id = (response.llm_output or {}).get("id")
        for generation in response.generations[0] if response.generations else ():
            if isinstance(generation, ChatGeneration):
                response_id = response_id or generation.message.response_metadata.get("id")
                for call in getattr(generation.message, "tool_calls", None) or ():
                    if call.get("id"):
                        self._remember_caller(run.attempt, call["id"], run.role)
        end_role_span(run.span, response_id=response_id if isinstance(response_id, str) else None)

    @guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._pop(run_id)
        if run is not None:
            end_role_span(run.span, error=error)

    @guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or serialized.get("name") or "tool")
        call_id = kwargs.get("tool_call_id")
        attempt = current_attempt()
        with self._lock:
            caller = self._callers.pop((attempt, call_id), None) if call_id else None
        role = caller or role_of(metadata, name)
        span = start_tool_span(
            name, role=role, framework=FRAMEWORK, call_id=call_id, run_id=str(run_id), arguments=input_str
        )
        if span is not None:
            self._keep(run_id, _Run(span, role, attempt))

    @guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._pop(run_id)
        if run is not None:
            failed = getattr(output, "status", "success") == "error"
            result = getattr(output, "content", output)
            end_tool_span(
                run.span, success=not failed, result=None if failed else result, error=result if failed else None
            )

    @guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._pop(run_id)
        if run is not None:
            end_tool_span(run.span, success=False, error=error)

    def _start_llm(
        self, run_id: UUID, metadata: dict[str, Any] | None, name: Any, messages: Sequence[BaseMessage] | None
    ) -> None:
        role = role_of(metadata, str(name or "llm"))
        attempt = current_attempt()
        if attempt is not None:
            with self._lock:
                previous, self._last_roles[attempt] = self._last_roles.get(attempt), role
                if len(self._last_roles) > _MAX_UNCLAIMED_TOOL_CALLS:
                    del self._last_roles[next(iter(self._last_roles))]
            if previous is not None and previous != role:
                record_handoff(previous, role, framework=FRAMEWORK)
        span = start_role_span(
            role,
            framework=FRAMEWORK,
            run_id=str(run_id),
            input_messages=convert_to_openai_messages(list(messages)) if messages is not None else None,
        )
        if span is not None:
            self._keep(run_id, _Run(span, role, current_attempt()))

    def _keep(self, run_id: UUID, run: _Run) -> None:
        with self._lock:
            self._runs[run_id] = run

    def _pop(self, run_id: UUID) -> _Run | None:
        with self._lock:
            return self._runs.pop(run_id, None)

    def _remember_caller(self, attempt: AttemptRef | None, call_id: str, role: str) -> None:
        with self._lock:
            self._callers[(attempt, call_id)] = role
            if len(self._callers) > _MAX_UNCLAIMED_TOOL_CALLS:
                del self._callers[next(iter(self._callers))]


class _Switch:
    """Stands where ``register_configure_hook`` expects a ContextVar.

    LangChain asks it for a handler each time it configures a run, on whatever thread or task:
    a real ContextVar set in ``instrument()`` would be unset in contexts created before it. A hook
    cannot be unregistered, so detaching makes the switch answer None.
    """

    def __init__(self) -> None:
        self.handler: RelightCallbackHandler | None = None
        self.registered = False

    def get(self) -> RelightCallbackHandler | None:
        return self.handler


_switch = _Switch()


def attach() -> None:
    """Add relight's handler to every LangChain run from now on, without touching call sites."""
    if not _switch.registered:
        register_configure_hook(cast(ContextVar[Any], _switch), inheritable=True)
        _switch.registered = True
    _switch.handler = RelightCallbackHandler()


def detach() -> None:
    _switch.handler = None
