"""One rollout as the dashboard shows it: attempts, the span tree on a timeline, and each LLM call.

Each call carries its messages, its response, its response tokens with their logprobs (each id
decoded on its own, so the exact tokens show, or just the ids where no tokenizer is known), and
the verdict of :meth:`relight.TransitionBuilder.explain_spans`: the transition it became
(role, group, credited reward, policy version) or why it became none, and, once an update trained
on it, the advantage the algorithm gave it and the version that update made (:mod:`relight.trained`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.records import Attempt, Span, SpanKind
from relight.store import Store
from relight.transitions.builder import TransitionBuilder, episode_return
from relight.transitions.trained_calls import TRAINED_SPAN, TrainedCall, trained_calls
from relight.transitions.verdicts import CallVerdict, call_numbers

__all__ = ["Decoder", "rollout_detail"]

Decoder = Callable[[Sequence[int]], str]
"""Token ids to text, as a tokenizer's ``decode``."""


async def rollout_detail(
    store: Store, builder: TransitionBuilder, rollout_id: str, decode: Decoder | None
) -> dict[str, object]:
    """Everything the rollout page shows, as JSON-ready data."""
    rollout = await store.get_rollout(rollout_id)
    attempts = await store.list_attempts(rollout_id)
    spans = await store.query_spans(rollout_id)
    verdict = builder.explain_spans(rollout, attempts, spans)
    trained = trained_calls(spans)
    numbers = call_numbers(spans)
    last = attempts[-1].attempt_id if attempts else None
    return {
        "rollout": rollout.model_dump(mode="json"),
        "reward": episode_return(span for span in spans if span.attempt_id == last),
        "verdict": {
            "attempt_id": verdict.attempt_id,
            "reason": verdict.reason.value if verdict.reason else None,
            "summary": verdict.summary(),
        },
        "attempts": [_attempt(attempt, spans) for attempt in attempts],
        "calls": [_call(call, numbers, decode, trained.get(call.span.span_id)) for call in verdict.calls],
        "annotations": _annotations(span for span in spans if span.attempt_id == last),
        "decoded": decode is not None,
    }


def _annotations(spans: Iterable[Span]) -> list[dict[str, object]]:
    """The last attempt's annotations (a judge's verdict and reasons, the final answer), in the order recorded.

    The trainer's own record of which calls an update trained on is an annotation too; the page shows it
    on each call (its ``trained`` column), so it is not listed again here.
    """
    return [
        {"name": span.name, "payload": _parsed(span.attributes.get(semconv.ANNOTATION))}
        for span in sorted(spans, key=lambda s: (s.start_time, s.sequence_id or 0))
        if span.kind is SpanKind.ANNOTATION and span.name != TRAINED_SPAN
    ]


def _attempt(attempt: Attempt, spans: Sequence[Span]) -> dict[str, object]:
    own = [span for span in spans if span.attempt_id == attempt.attempt_id]
    return {**attempt.model_dump(mode="json"), "spans": span_tree(own)}


def span_tree(spans: Sequence[Span]) -> list[dict[str, object]]:
    """The spans depth-first under their parents, each with its depth and its place on the timeline (ms)."""
    ids = {span.span_id for span in spans}
    children: dict[str | None, list[Span]] = {}
    for span in sorted(spans, key=lambda s: (s.start_time, s.sequence_id or 0)):
        children.setdefault(span.parent_id if span.parent_id in ids else None, []).append(span)
    origin = min((span.start_time for span in spans), default=0)
    rows: list[dict[str, object]] = []

    def visit(parent_id: str | None, depth: int) -> None:
        for span in children.get(parent_id, []):
            rows.append(_span_row(span, depth, origin))
            visit(span.span_id, depth + 1)

    visit(None, 0)
    return rows


def _span_row(span: Span, depth: int, origin: int) -> dict[str, object]:
    attributes = span.attributes
    return {
        "span_id": span.span_id,
        "name": span.name,
        "kind": span.kind.value,
        "depth": depth,
        "start_ms": (span.start_time - origin) / 1e6,
        "duration_ms": (span.end_time - span.start_time) / 1e6,
        "status": span.status_code,
        "error": span.status_message,
        "role": attributes.get(semconv.ROLE),
        "reward": attributes.get(semconv.REWARD),
        "tool": attributes.get(semconv.GEN_AI_TOOL_NAME),
        "arguments": attributes.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS),
        "result": attributes.get(semconv.GEN_AI_TOOL_CALL_RESULT),
        "handoff_from": attributes.get(semconv.HANDOFF_FROM),
        "handoff_to": attributes.get(semconv.HANDOFF_TO),
    }


def _served_by(attributes: Mapping[str, JsonValue]) -> str | None:
    """The policy that served a call of a run with several policies, in words; None in a run of one."""
    if isinstance(policy := attributes.get(semconv.POLICY), str):
        return f"policy {policy}"
    if attributes.get(semconv.POLICY_UNROUTED) is True:
        return "the base model (its role was unknown when it arrived)"
    return None


def _call(
    call: CallVerdict, numbers: Mapping[str, int], decode: Decoder | None, trained: TrainedCall | None
) -> dict[str, object]:
    attributes = call.span.attributes
    transition = call.transition
    return {
        "span_id": call.span.span_id,
        "attempt_id": call.span.attempt_id,
        "step": call.step,
        "number": numbers[call.span.span_id],
        "role": call.role,
        "policy": call.policy,
        "served_by": _served_by(attributes),
        "reward": call.reward,
        "trained": call.trained,
        "reason": call.reason.value if call.reason else None,
        "detail": call.detail,
        "notes": [note.value for note in call.notes],
        "group_id": transition.group_id if transition else None,
        "advantage": trained.advantage if trained else None,
        "trained_into": trained.policy_version if trained else None,
        "policy_version": attributes.get(semconv.POLICY_VERSION),
        "model": attributes.get(semconv.GEN_AI_REQUEST_MODEL),
        "finish_reasons": attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS),
        "messages": _parsed(attributes.get(semconv.GEN_AI_INPUT_MESSAGES)),
        "output": _parsed(attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES)),
        "prompt_tokens": _count(attributes.get(semconv.PROMPT_TOKEN_IDS)),
        "tokens": _tokens(attributes, decode),
        "duration_ms": (call.span.end_time - call.span.start_time) / 1e6,
        "error": call.span.status_message,
    }


def _tokens(attributes: dict[str, JsonValue], decode: Decoder | None) -> list[dict[str, object]]:
    """The response's tokens: id, its own text (None without a tokenizer) and logprob (None when not recorded)."""
    ids = attributes.get(semconv.RESPONSE_TOKEN_IDS)
    if not isinstance(ids, list):
        return []
    logprobs = attributes.get(semconv.RESPONSE_LOGPROBS)
    values = cast(list[Any], logprobs) if isinstance(logprobs, list) and len(logprobs) == len(ids) else None
    return [
        {
            "id": token,
            "text": decode([int(cast(int, token))]) if decode is not None else None,
            "logprob": values[index] if values is not None else None,
        }
        for index, token in enumerate(ids)
    ]


def _parsed(text: JsonValue | None) -> JsonValue:
    """The GenAI messages attribute (JSON text) as data; text that is not JSON as it is."""
    if not isinstance(text, str):
        return text
    try:
        return cast(JsonValue, json.loads(text))
    except ValueError:
        return text


def _count(value: JsonValue | None) -> int | None:
    return len(value) if isinstance(value, list) else None
