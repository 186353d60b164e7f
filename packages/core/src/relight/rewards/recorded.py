"""A finished rollout as a reward function reads it afterwards: the task, its messages, tool calls and results.

A rollout's reward is normally computed by the agent while it runs, from objects of its framework. To score
a rollout again later (``relight rescore``), a reward function reads what the store recorded instead, the
same for every framework: each LLM call's request messages and reply as the gateway saw them (tool results
included, as the next call's request holds them), the tool runs an adapter recorded, and the rewards the
rollout earned. :func:`recorded_rollout` builds it from one attempt's spans.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from relight import semconv
from relight.records import Rollout, Span, SpanKind
from relight.rewards.render import RenderedRollout, answered_calls, content_text, render_rollout, span_messages

__all__ = ["RecordedCall", "RecordedRollout", "RewardFunction", "ToolRun", "recorded_rollout"]

Message = Mapping[str, Any]
"""An OpenAI chat message as recorded (``role``, ``content``, ``tool_calls``, ``tool_call_id``, …)."""


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One LLM call: what was asked and what the model answered."""

    messages: tuple[Message, ...]
    """The request's messages (for ``/v1/completions``, one user message holding the prompt)."""
    reply: Message
    """The model's answer as one assistant message (``content`` and any ``tool_calls``)."""
    role: str | None
    """The agent or node that made the call, where the gateway was told at call time."""

    @property
    def text(self) -> str:
        """The reply's text."""
        return content_text(self.reply.get("content"))


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool run an adapter recorded (a tool span)."""

    name: str
    arguments: str | None
    result: str | None
    success: bool | None
    error: str | None


@dataclass(frozen=True, slots=True)
class RecordedRollout:
    """What a reward function is given to score one finished rollout again (see the module docstring)."""

    rollout_id: str
    group_id: str
    task: JsonValue
    calls: tuple[RecordedCall, ...]
    """Every LLM call of the attempt that counts, in the order made (a call a client gave up on and sent again
    unchanged is left out: its reply never reached the agent)."""
    tools: tuple[ToolRun, ...]
    reward: float | None
    """The rollout's return as recorded: the sum of the rewards it earned (None when it recorded none)."""
    rewards: Mapping[str, float]
    """Each reward it earned, by name (``""`` for the agent's own; ``judge`` for a judge's)."""
    spans: tuple[Span, ...]
    """The attempt's spans, for anything else."""

    @property
    def messages(self) -> list[Message]:
        """The conversation as its last call saw it, that call's reply included: for a single conversation
        (one agent), every message, tool result and answer of the rollout."""
        if not self.calls:
            return []
        return [*self.calls[-1].messages, self.calls[-1].reply]

    @property
    def final_answer(self) -> str:
        """The text of the last call's reply."""
        return self.calls[-1].text if self.calls else ""

    def rendered(self, max_chars: int = 6000) -> RenderedRollout:
        """The rollout as a judge reads it (:func:`relight.rewards.render_rollout`)."""
        return render_rollout(self.rollout_id, self.spans, max_chars=max_chars)


RewardFunction = Callable[[Any, RecordedRollout], float | Awaitable[float | None] | None]
"""``reward(task, rollout) -> float | None``, plain or ``async``: the reward of one recorded rollout, or None
for none. It gets the task as the rollout function got it."""


def recorded_rollout(rollout: Rollout, spans: Sequence[Span]) -> RecordedRollout:
    """The rollout as recorded by ``spans`` (pass only the spans of the attempt that counts)."""
    ordered = sorted(spans, key=lambda span: (span.start_time, span.sequence_id or 0))
    llm = answered_calls([s for s in ordered if s.kind is SpanKind.LLM and s.status_code != "ERROR"])
    rewards: dict[str, float] = {}
    for span in ordered:
        value = span.attributes.get(semconv.REWARD)
        aimed = span.attributes.get(semconv.REWARD_ROLE)
        if (
            span.kind is SpanKind.REWARD
            and not aimed
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            name = str(span.attributes.get(semconv.REWARD_NAME) or "")
            rewards[name] = rewards.get(name, 0.0) + float(value)
    return RecordedRollout(
        rollout_id=rollout.rollout_id,
        group_id=rollout.group_id,
        task=rollout.input,
        calls=tuple(_call(span) for span in llm),
        tools=tuple(_tool(span) for span in ordered if span.kind is SpanKind.TOOL),
        reward=sum(rewards.values()) if rewards else None,
        rewards=rewards,
        spans=tuple(ordered),
    )


def _call(span: Span) -> RecordedCall:
    messages = span_messages(span, semconv.GEN_AI_INPUT_MESSAGES)
    if not messages:  # a completion's prompt is recorded as a JSON string
        prompt = _json(span.attributes.get(semconv.GEN_AI_INPUT_MESSAGES))
        messages = [{"role": "user", "content": prompt if isinstance(prompt, str) else json.dumps(prompt)}]
    replies = span_messages(span, semconv.GEN_AI_OUTPUT_MESSAGES)
    role = span.attributes.get(semconv.ROLE)
    return RecordedCall(
        messages=tuple(messages),
        reply=replies[-1] if replies else {"role": "assistant", "content": ""},
        role=role if isinstance(role, str) else None,
    )


def _tool(span: Span) -> ToolRun:
    attributes = span.attributes
    success = attributes.get(semconv.TOOL_SUCCESS)
    return ToolRun(
        name=str(attributes.get(semconv.GEN_AI_TOOL_NAME) or span.name),
        arguments=_string(attributes.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS)),
        result=_string(attributes.get(semconv.GEN_AI_TOOL_CALL_RESULT)),
        success=success if isinstance(success, bool) else None,
        error=span.status_message if span.status_code == "ERROR" else None,
    )


def _string(value: JsonValue | None) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: JsonValue | None) -> JsonValue:
    if not isinstance(value, str):
        return value
    try:
        parsed: JsonValue = json.loads(value)
    except ValueError:
        return value
    return parsed
