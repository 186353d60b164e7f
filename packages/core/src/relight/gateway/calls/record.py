"""One call through the gateway, gathered from the upstream's answer and written as its LLM span.

A whole response and a stream of chunks feed the same :meth:`Exchange.add` (a response's
``message`` is read like a chunk's ``delta``), so streamed and plain calls produce identical spans.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight._internal.ids import random_hex
from relight.gateway.calls.retokenize import Retokenizer, end_of_turn, response_text
from relight.gateway.upstreams.protocol import Endpoint
from relight.records import Span, SpanKind
from relight.tracing.context import AttemptRef

__all__ = ["Exchange", "TraceParent"]

Json = dict[str, Any]

_OPERATIONS: dict[Endpoint, str] = {"chat": "chat", "completions": "text_completion"}


@dataclass(frozen=True, slots=True)
class TraceParent:
    """The W3C ``traceparent`` a client sent, so the LLM span nests under the client's own span."""

    trace_id: str
    span_id: str

    @classmethod
    def parse(cls, header: str | None) -> TraceParent | None:
        parts = (header or "").split("-")
        if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
            return None
        return cls(parts[1], parts[2])


@dataclass(slots=True)
class Exchange:
    """What is known about one call so far; :meth:`to_span` makes its LLM span."""

    session: AttemptRef
    endpoint: Endpoint
    request: Json
    response_id: str
    upstream: str = ""
    policy_version: int | None = None
    policy_version_segments: list[list[int]] | None = None
    trace_parent: TraceParent | None = None
    started_ns: int = field(default_factory=time.time_ns)
    model: str | None = None
    text: list[str] = field(default_factory=list[str])
    tool_calls: dict[int, Json] = field(default_factory=dict[int, Json])
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    usage: Json | None = None
    retokenized: bool = False
    inexact: str | None = None
    """Why a retokenized call's ids are not what the model produced (an :class:`relight.chat.Inexact` and why)."""
    error: str | None = None
    error_type: str | None = None
    upstream_status: int | None = None
    attributes: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])
    """Further span attributes the route knows (hosted tools it dropped, a capped output budget, a refusal)."""

    def add(self, answer: Json) -> None:
        """Take in a whole response or one stream chunk, in the vLLM dialect."""
        self.model = answer.get("model") or self.model
        if answer.get("prompt_token_ids") is not None:
            self.prompt_token_ids = list(answer["prompt_token_ids"])
        if answer.get("policy_version") is not None:
            self.policy_version = int(answer["policy_version"])
        if answer.get("policy_version_segments"):
            self.policy_version_segments = [[int(i), int(v)] for i, v in answer["policy_version_segments"]]
        if answer.get("usage"):
            self.usage = answer["usage"]
        for choice in answer.get("choices") or ():
            self._add_choice(choice)

    def _add_choice(self, choice: Json) -> None:
        if self.endpoint == "chat":
            part: Json = choice.get("delta") or choice.get("message") or {}
            text = part.get("content")
            for position, call in enumerate(part.get("tool_calls") or ()):
                self._add_tool_call(call.get("index", position), call)
        else:
            text = choice.get("text")
        if text:
            self.text.append(text)
        if choice.get("prompt_token_ids") is not None:
            self.prompt_token_ids = list(choice["prompt_token_ids"])
        token_ids: list[int] | None = choice.get("token_ids")
        if token_ids is not None:  # extended in place: a stream's chunks cost the same at its end as at its start
            if self.response_token_ids is None:
                self.response_token_ids = []
            self.response_token_ids += token_ids
        logprobs: Json | None = choice.get("logprobs")
        if logprobs:
            if self.logprobs is None:
                self.logprobs = []
            if self.endpoint == "chat":
                self.logprobs += [entry["logprob"] for entry in logprobs.get("content") or ()]
            else:
                self.logprobs += logprobs.get("token_logprobs") or ()
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _add_tool_call(self, index: int, call: Json) -> None:
        merged = self.tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if call.get("id"):
            merged["id"] = call["id"]
        function: Json = call.get("function") or {}
        if function.get("name"):
            merged["function"]["name"] = function["name"]
        if function.get("arguments"):
            merged["function"]["arguments"] += function["arguments"]

    def fail(self, error: str, *, error_type: str, upstream_status: int | None = None) -> None:
        self.error, self.error_type, self.upstream_status = error, error_type, upstream_status

    @property
    def content(self) -> str:
        return "".join(self.text)

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_token_ids is not None and self.response_token_ids is not None

    def retokenize(self, retokenizer: Retokenizer) -> None:
        """Fill in token ids the upstream did not give, from the text; logprobs are dropped.

        A chat turn the model ended itself (``stop``, ``tool_calls``) gets the end-of-turn token it
        sampled but no server shows in the text, so a trainer learns to stop. Usage then counts the
        ids recorded, so that the span agrees with itself.
        """
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        if self.endpoint == "chat":
            self.prompt_token_ids = retokenizer.prompt_ids(self.request["messages"], self.request.get("tools"))
        else:
            self.prompt_token_ids = retokenizer.text_ids(str(self.request.get("prompt", "")))
        response = retokenizer.text_ids(response_text(self.content, calls))
        end = end_of_turn(retokenizer)
        ended_itself = self.finish_reason == "tool_calls" or (
            self.finish_reason == "stop" and not self.request.get("stop")
        )
        if self.endpoint == "chat" and ended_itself and end is not None:  # (with stop strings, a string may have)
            response.append(end)
        self.response_token_ids = response
        self.logprobs = None
        self.retokenized = True
        if calls:  # the model wrote its calls in its own markup, which the text no longer holds
            self.inexact = (
                "tool_calls_not_rendered: the upstream gave no token ids, and its tool calls are retokenized as JSON "
                "text, not as the model wrote them"
            )
        self.usage = {"prompt_tokens": len(self.prompt_token_ids), "completion_tokens": len(response)}

    def to_span(self) -> Span:
        ended_ns = time.time_ns()
        request_model = str(self.request.get("model", ""))
        attributes: dict[str, JsonValue] = {
            semconv.SPAN_KIND: SpanKind.LLM.value,
            semconv.GEN_AI_OPERATION_NAME: _OPERATIONS[self.endpoint],
            semconv.GEN_AI_SYSTEM: "openai",
            semconv.GEN_AI_REQUEST_MODEL: request_model,
            semconv.GEN_AI_RESPONSE_ID: self.response_id,
            semconv.UPSTREAM: self.upstream,
            semconv.STREAM: bool(self.request.get("stream")),
            semconv.RETOKENIZED: self.retokenized,
            **_inexact(self.inexact),
            semconv.ROLLOUT_ID: self.session.rollout_id,
            semconv.ATTEMPT_ID: self.session.attempt_id,
        }
        for key, name in (
            (semconv.GEN_AI_REQUEST_TEMPERATURE, "temperature"),
            (semconv.GEN_AI_REQUEST_TOP_P, "top_p"),
            (semconv.GEN_AI_REQUEST_MAX_TOKENS, "max_tokens"),
            (semconv.GEN_AI_REQUEST_MAX_TOKENS, "max_completion_tokens"),  # the newer name wins
        ):
            if isinstance(self.request.get(name), int | float):
                attributes[key] = self.request[name]
        stop = self.request.get("stop")
        if stop:
            attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = [stop] if isinstance(stop, str) else list(stop)
        if self.endpoint == "chat":
            attributes[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(self.request.get("messages"))
        else:
            attributes[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(self.request.get("prompt"))
        if self.request.get("tools"):
            attributes[semconv.GEN_AI_TOOL_DEFINITIONS] = json.dumps(self.request["tools"])
        if self.policy_version is not None:
            attributes[semconv.POLICY_VERSION] = self.policy_version
        if self.policy_version_segments:
            attributes[semconv.POLICY_VERSION_SEGMENTS] = cast(list[JsonValue], self.policy_version_segments)
        if self.upstream_status is not None:
            attributes[semconv.UPSTREAM_STATUS] = self.upstream_status
        attributes.update(self.attributes)
        if self.error is None:
            attributes.update(self._result_attributes())
        else:
            attributes[semconv.ERROR_TYPE] = self.error_type or "error"
        trace_id = self.trace_parent.trace_id if self.trace_parent else random_hex(32)
        return Span(
            rollout_id=self.session.rollout_id,
            attempt_id=self.session.attempt_id,
            span_id=random_hex(16),
            trace_id=trace_id,
            parent_id=self.trace_parent.span_id if self.trace_parent else None,
            name=f"{_OPERATIONS[self.endpoint]} {request_model}".strip(),
            start_time=self.started_ns,
            end_time=max(ended_ns, self.started_ns),
            attributes=attributes,
            status_code="ERROR" if self.error is not None else "OK",
            status_message=self.error,
        )

    def _result_attributes(self) -> dict[str, JsonValue]:
        message: Json = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        attributes: dict[str, JsonValue] = {
            semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([message]),
            semconv.GEN_AI_RESPONSE_MODEL: self.model or "",
        }
        if self.finish_reason is not None:
            attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [self.finish_reason]
        usage = self.usage or {}
        input_tokens = usage.get("prompt_tokens", len(self.prompt_token_ids or ()))
        output_tokens = usage.get("completion_tokens", len(self.response_token_ids or ()))
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = int(input_tokens)
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = int(output_tokens)
        if self.prompt_token_ids is not None and self.response_token_ids is not None:
            attributes[semconv.PROMPT_TOKEN_IDS] = list[JsonValue](self.prompt_token_ids)
            attributes[semconv.RESPONSE_TOKEN_IDS] = list[JsonValue](self.response_token_ids)
        if self.logprobs is not None and len(self.logprobs) == len(self.response_token_ids or ()):
            attributes[semconv.RESPONSE_LOGPROBS] = list[JsonValue](self.logprobs)
        return attributes


def _inexact(reason: str | None) -> dict[str, JsonValue]:
    """The exactness attributes of a retokenized call whose ids are not what the model produced."""
    if reason is None:
        return {}
    code = reason.split(":", 1)[0]
    return {semconv.RETOKENIZED_EXACT: False, semconv.RETOKENIZED_MISMATCH: reason, semconv.RETOKENIZED_REASONS: [code]}
