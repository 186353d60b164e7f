"""The compatibility kit's framework half: a framework's agent makes its first tool round trip through relight.

:mod:`relight_testing.compat` drives raw clients call by call; here a whole agent (LangGraph,
AutoGen, the Agents SDK, CrewAI, plain LangChain) runs once in dev mode (:meth:`relight.Trainer.adev`)
against a served model, with its framework's adapter instrumented, and :func:`check_tool_round_trip`
holds what was recorded to what makes the run trainable::

    from relight_testing.compat_agents import ROUND_TRIP_TASK, check_tool_round_trip, run_agent

    async def test_my_framework(served):  # served.base_url, served.model, served.reference
        run = await run_agent(my_agent, ROUND_TRIP_TASK, base_url=served.base_url, model=served.model)
        check_tool_round_trip(run, served.reference, role="assistant")

The agent asks the model for the ``add`` tool (:data:`relight_testing.compat.ADD_TOOL`), runs it,
and sends the model the assistant turn that called it (``content: null`` in most frameworks) and
the tool's answer: the round trip that a model without tool support in its template (SmolLM2)
makes only when the engine forces the call (``tool_choice`` required or named, or, for frameworks
that always send ``auto``, relight-torch's ``--force-first-tool-call``). Each call must come back
trainable, with exact ids; each joins its framework role; the tool is a tool span.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import JsonValue
from rich.console import Console

from relight import semconv
from relight.agent import Agent
from relight.records import RolloutStatus, Span, SpanKind, Transition
from relight.stores.memory import InMemoryStore
from relight.training.dev_report import DevResult
from relight.training.trainer import Trainer
from relight.transitions.builder import TransitionBuilder
from relight_testing.compat import Reference, check_recorded_span

__all__ = ["FORCED_TOKENS", "ROUND_TRIP_TASK", "AgentRun", "check_tool_round_trip", "run_agent"]

ROUND_TRIP_TASK = "What is 2 + 3? Use the add tool."
FORCED_TOKENS = 40
"""Room for one forced ``add`` call (SmolLM2 writes it in about 25 tokens) and its end-of-turn token."""
RUN_TIMEOUT = 600.0
"""Seconds the one rollout may take: a CPU model on a busy machine is slow; reached only when hung."""


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One dev-mode rollout of an agent: how it went, what its attempt recorded and the transitions it gives."""

    result: DevResult
    spans: list[Span]
    transitions: list[Transition]

    def of_kind(self, kind: SpanKind) -> list[Span]:
        """The attempt's spans of ``kind``, in the order they started."""
        return sorted((span for span in self.spans if span.kind is kind), key=lambda span: span.start_time)


async def run_agent(agent: Agent, task: JsonValue, *, base_url: str, model: str) -> AgentRun:
    """Run ``agent`` once on ``task`` in dev mode against the OpenAI-compatible server at ``base_url``."""
    store = InMemoryStore()
    trainer = Trainer(store=store, max_attempts=1, timeout=RUN_TIMEOUT, console=Console(file=io.StringIO()))
    (result,) = await trainer.adev(agent, [task], base_url=base_url, model=model, api_key="unused")
    spans = await store.query_spans(result.rollout.rollout_id)
    transitions = await TransitionBuilder().from_store(store, [result.rollout])
    return AgentRun(result, spans, transitions)


def check_tool_round_trip(
    run: AgentRun, reference: Reference, *, tool: str = "add", role: str | None = None, answered: bool = False
) -> None:
    """Hold a run to its first tool round trip: see the module docstring.

    ``role`` is the framework role every call must have (the agent's name); None accepts any role.
    ``answered=True`` also asks that the last call answered in text, calling no tool: the model's
    final answer, after the tool's result went back to it.
    """
    assert run.result.rollout.status is RolloutStatus.SUCCEEDED, run.result.rollout.error
    calls = run.of_kind(SpanKind.LLM)
    assert len(calls) >= 2, f"{len(calls)} LLM call(s): no round trip"
    assert run.result.trainable_calls == len(calls), run.result
    for span in calls:
        check_recorded_span(reference, span)
    (call,) = _tool_calls(calls[0])
    assert cast(list[str], calls[0].attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]) == ["tool_calls"]
    assert call["function"]["name"] == tool
    later = [json.loads(cast(str, span.attributes[semconv.GEN_AI_INPUT_MESSAGES])) for span in calls[1:]]
    assert any(_holds_round_trip(messages, call["id"]) for messages in later), (
        f"no later call sent the model the turn that called {tool} ({call['id']}) and the tool's answer"
    )
    if answered:
        (last,) = json.loads(cast(str, calls[-1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
        assert not last.get("tool_calls"), f"the last call called {tool} again: the model never answered"
        assert last.get("content"), "the last call answered with no text"
    ran = [span for span in run.of_kind(SpanKind.TOOL) if span.attributes.get(semconv.GEN_AI_TOOL_NAME) == tool]
    assert ran, f"no tool span for {tool}"
    assert all(span.attributes.get(semconv.TOOL_SUCCESS) is True for span in ran)
    recorded = {
        (tuple(cast(list[int], a[semconv.PROMPT_TOKEN_IDS])), tuple(cast(list[int], a[semconv.RESPONSE_TOKEN_IDS]))): a
        for a in (span.attributes for span in calls)
    }
    assert len(run.transitions) == len(calls)
    for transition in run.transitions:
        key = (tuple(transition.prompt_token_ids), tuple(transition.response_token_ids))
        assert key in recorded, "a transition's token ids are not those of any call"
        assert transition.response_logprobs == recorded[key][semconv.RESPONSE_LOGPROBS]
        assert transition.role is not None, "a call joined no framework role"
        if role is not None:
            assert transition.role == role


def _tool_calls(span: Span) -> list[dict[str, Any]]:
    (message,) = json.loads(cast(str, span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
    return list(message.get("tool_calls") or [])


def _holds_round_trip(messages: Sequence[Mapping[str, Any]], call_id: str) -> bool:
    """Whether ``messages`` hold an assistant turn calling ``call_id`` (no text) and then the tool's answer to it."""
    for index, message in enumerate(messages):
        calls = cast(list[Mapping[str, Any]], message.get("tool_calls") or [])
        ids = [call.get("id") for call in calls]
        if message.get("role") == "assistant" and call_id in ids and not message.get("content"):
            return any(m.get("role") == "tool" and m.get("tool_call_id") == call_id for m in messages[index + 1 :])
    return False
