"""What one recorded attempt asked the model and what the model answered, call by call, read from a store.

A replay serves these answers again (:mod:`relight.replay.script`), so each keeps everything the gateway
recorded of the answer: the text, the tool calls with their ids (the agent's next request names them), the
token ids and logprobs, the prompt's token ids, the finish reason and the model name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.errors import ConfigError, NotFoundError
from relight.records import Rollout, Span, SpanKind
from relight.scripted.scripts import Endpoint, Reply, ToolCall
from relight.store import Store

__all__ = ["RecordedExchange", "Recording", "read_recording"]


@dataclass(frozen=True, slots=True)
class RecordedExchange:
    """One LLM call of the recording: the request as the model got it and the reply it gave."""

    index: int
    """Its place among the attempt's calls, from 0, in the order they were made."""
    endpoint: Endpoint
    request: JsonValue
    """The chat messages (``/v1/chat/completions``) or the prompt (``/v1/completions``)."""
    tools: JsonValue
    """The tools the request offered (None when none)."""
    reply: Reply
    failed: bool = False
    """True for a call the model's server failed: a replay answers it with the same error."""
    error: str | None = None
    status: int | None = None
    """The HTTP status the server failed it with."""


@dataclass(frozen=True, slots=True)
class Recording:
    """One attempt of one rollout, as a replay needs it."""

    rollout: Rollout
    attempt_id: str
    spans: tuple[Span, ...]
    exchanges: tuple[RecordedExchange, ...]

    @property
    def model(self) -> str:
        """The model name the agent asked for (what it is told to use again)."""
        for span in self.spans:
            if span.kind is SpanKind.LLM and isinstance(
                model := span.attributes.get(semconv.GEN_AI_REQUEST_MODEL), str
            ):
                return model
        return "replay"

    @property
    def policy_version(self) -> int | None:
        """The policy version the first call was served by."""
        for span in self._calls():
            version = span.attributes.get(semconv.POLICY_VERSION)
            if isinstance(version, int):
                return version
        return None

    def _calls(self) -> list[Span]:
        return sorted(
            (s for s in self.spans if s.kind is SpanKind.LLM), key=lambda s: (s.start_time, s.sequence_id or 0)
        )


async def read_recording(store: Store, rollout_id: str, attempt_id: str | None = None) -> Recording:
    """The recording of ``rollout_id``'s attempt ``attempt_id`` (its last one by default).

    Raises:
        relight.NotFoundError: the store has no such rollout, or the rollout no such attempt (the ones it has named).
        relight.ConfigError: the attempt recorded no LLM call: there is nothing to replay.
    """
    rollout = await store.get_rollout(rollout_id)
    attempts = await store.list_attempts(rollout_id)
    if not attempts:
        raise ConfigError(
            f"rollout {rollout_id!r} never ran (it is {rollout.status.value}): there is nothing to replay"
        )
    known = [attempt.attempt_id for attempt in attempts]
    chosen = attempt_id or known[-1]
    if chosen not in known:
        raise NotFoundError(f"rollout {rollout_id!r} has no attempt {chosen!r}; its attempts: {', '.join(known)}")
    spans = tuple(await store.query_spans(rollout_id, chosen))
    calls = sorted(
        (s for s in spans if s.kind is SpanKind.LLM and s.attributes.get(semconv.REFUSED) is not True),
        key=lambda s: (s.start_time, s.sequence_id or 0),
    )  # a call the gateway refused itself never reached the model: the gateway refuses it again
    if not calls:
        raise ConfigError(
            f"attempt {chosen!r} of rollout {rollout_id!r} recorded no LLM call: there is nothing to replay"
        )
    exchanges = tuple(_exchange(index, span) for index, span in enumerate(calls))
    return Recording(rollout, chosen, spans, exchanges)


def _exchange(index: int, span: Span) -> RecordedExchange:
    attributes = span.attributes
    endpoint: Endpoint = "completions" if attributes.get(semconv.GEN_AI_OPERATION_NAME) == "text_completion" else "chat"
    outputs = _json(attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES))
    message = cast(dict[str, Any], outputs[-1]) if isinstance(outputs, list) and outputs else {}
    content = message.get("content")
    finish = attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS)
    reply = Reply(
        text=content if isinstance(content, str) else "",
        tool_calls=[_tool_call(call) for call in cast(list[Any], message.get("tool_calls") or [])],
        token_ids=_ints(attributes.get(semconv.RESPONSE_TOKEN_IDS)),
        logprobs=_floats(attributes.get(semconv.RESPONSE_LOGPROBS)),
        finish_reason=str(cast(list[Any], finish)[0]) if isinstance(finish, list) and finish else None,
        prompt_token_ids=_ints(attributes.get(semconv.PROMPT_TOKEN_IDS)),
        model=model if isinstance(model := attributes.get(semconv.GEN_AI_RESPONSE_MODEL), str) and model else None,
    )
    return RecordedExchange(
        index=index,
        endpoint=endpoint,
        request=_json(attributes.get(semconv.GEN_AI_INPUT_MESSAGES)),
        tools=_json(attributes.get(semconv.GEN_AI_TOOL_DEFINITIONS)),
        reply=reply,
        failed=span.status_code == "ERROR",
        error=span.status_message,
        status=status if isinstance(status := attributes.get(semconv.UPSTREAM_STATUS), int) else None,
    )


def _tool_call(call: Any) -> ToolCall:
    entry = cast(dict[str, Any], call) if isinstance(call, dict) else {}
    function = cast(dict[str, Any], entry.get("function") or {})
    arguments = function.get("arguments", "")
    return ToolCall(
        str(function.get("name", "")),
        arguments if isinstance(arguments, str) else json.dumps(arguments),
        id=str(entry["id"]) if entry.get("id") else None,
    )


def _json(value: JsonValue | None) -> JsonValue:
    if not isinstance(value, str):
        return value
    try:
        parsed: JsonValue = json.loads(value)
    except ValueError:
        return value
    return parsed


def _ints(value: JsonValue | None) -> Sequence[int] | None:
    return [int(v) for v in cast(list[int], value)] if isinstance(value, list) else None


def _floats(value: JsonValue | None) -> Sequence[float] | None:
    return [float(v) for v in cast(list[float], value)] if isinstance(value, list) else None
