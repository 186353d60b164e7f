"""Anthropic's Messages API (``POST /v1/messages``) served through the gateway's chat path.

Agents built on the Anthropic SDK, the Claude Agent SDK or Claude-Code-style harnesses can point
at a local policy through the gateway (``base_url`` is the attempt's URL without ``/v1``; the
API key goes in ``x-api-key``, as Anthropic's clients send it). Like the Responses API
(:mod:`relight.gateway.dialects.responses`), each request is translated into a chat request, which the
gateway runs and records as its own (one LLM span, exact token ids and logprobs, the span's
response id being the ``msg_…`` id the client sees), and the reply is translated back, whole or as
Anthropic's stream events. Errors come back in Anthropic's shape
(``{"type": "error", "error": {"type", "message"}}``).

Text, ``tool_use`` and ``tool_result`` blocks are served; thinking blocks in the history are
dropped (a chat request has no place for them); images, documents, server tools and ``top_k``
are refused with a 400 naming the field. A ``tool_result`` with ``is_error`` keeps it on its chat
tool message (``"is_error": true``), so the span holds it and a chat template that knows it can show it.

A ``system`` turn inside ``messages`` (Claude Code sends one mid-conversation for a model it does
not know) stays where it was sent, as a chat system message: the span records the conversation as
sent, and the model's chat template renders it in place (ChatML, Llama 3 and the relight models'
templates take system turns anywhere; a template that does not makes the upstream's 400, recorded).

A prompt past the model's context is answered as Anthropic answers it (400 ``invalid_request_error``,
"prompt is too long: N tokens > M maximum"), and a ``max_tokens`` past what the context leaves is
capped (:mod:`relight.gateway.overflow`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from relight.gateway.errors import GatewayError
from relight.gateway.overflow import anthropic_message

__all__ = ["MessageStream", "chat_request", "error_body", "error_body_of", "message_from_chat", "sse"]

Json = dict[str, Any]

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error_body(status_code: int, message: str) -> Json:
    """An error in Anthropic's shape."""
    kind = _ERROR_TYPES.get(status_code, "invalid_request_error" if status_code < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body_of(error: GatewayError) -> Json:
    """A gateway error in Anthropic's shape and words (a context overflow as "prompt is too long")."""
    if error.overflow is not None:
        return error_body(400, anthropic_message(error.overflow))
    return error_body(error.status_code, error.message)


def sse(event: Json) -> bytes:
    """One server-sent event as Anthropic frames it (an ``event:`` line naming its type)."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


# -- requests -----------------------------------------------------------------------------------


def chat_request(body: Json) -> Json:
    """The chat completions request that asks what the Messages request ``body`` asks.

    Raises:
        GatewayError: 400, naming the field the gateway cannot serve.
    """
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "model: a model name the gateway serves is required", param="model")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise GatewayError(400, "max_tokens: a positive integer is required", param="max_tokens")
    if body.get("top_k") is not None:
        raise GatewayError(400, "top_k: the gateway samples with temperature and top_p only", param="top_k")
    messages: list[Json] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text(system, "system")})
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise GatewayError(400, "messages: a non-empty list of messages is required", param="messages")
    for index, raw in enumerate(cast(list[object], raw_messages)):
        messages += _chat_messages(_mapping(raw, f"messages.{index}"), f"messages.{index}")
    chat: Json = {"model": model, "messages": messages, "max_tokens": max_tokens}
    for name in ("temperature", "top_p", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("tools"):
        chat["tools"] = [_chat_tool(tool, f"tools.{i}") for i, tool in enumerate(_list(body["tools"], "tools"))]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _chat_tool_choice(_mapping(body["tool_choice"], "tool_choice"))
    return chat


def _chat_messages(message: Mapping[str, Any], param: str) -> list[Json]:
    role = message.get("role")
    if role == "system":
        return [{"role": "system", "content": _text(message.get("content") or "", f"{param}.content")}]
    if role not in ("user", "assistant"):
        raise GatewayError(400, f"{param}.role must be user, assistant or system", param=f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    texts: list[str] = []
    calls: list[Json] = []
    results: list[Json] = []
    for index, raw in enumerate(_list(content, f"{param}.content")):
        where = f"{param}.content.{index}"
        block = _mapping(raw, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use" and role == "assistant":
            arguments = json.dumps(block.get("input") or {})
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "tool_result" and role == "user":
            output = block.get("content")
            text = output if isinstance(output, str) else _text(output or [], f"{where}.content")
            result: Json = {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}
            if block.get("is_error"):
                result["is_error"] = True
            results.append(result)
        elif kind not in ("thinking", "redacted_thinking"):
            raise GatewayError(400, f"{where} is a {kind!r} block; the gateway serves text and tools only", param=where)
    if role == "assistant":
        turn: Json = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            turn["tool_calls"] = calls
        return [turn]
    return results + ([{"role": "user", "content": "".join(texts)}] if texts or not results else [])


def _text(content: object, param: str) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for index, raw in enumerate(_list(content, param)):
        block = _mapping(raw, f"{param}.{index}")
        if block.get("type") != "text":
            raise GatewayError(400, f"{param}.{index} must be a text block", param=f"{param}.{index}")
        parts.append(str(block.get("text", "")))
    return "".join(parts)


def _chat_tool(tool: object, param: str) -> Json:
    spec = _mapping(tool, param)
    if spec.get("type") not in (None, "custom") or not isinstance(spec.get("name"), str):
        raise GatewayError(400, f"{param}: the gateway serves client tools ({{name, input_schema}}) only", param=param)
    function: Json = {"name": spec["name"], "parameters": spec.get("input_schema") or {"type": "object"}}
    if spec.get("description"):
        function["description"] = spec["description"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Mapping[str, Any]) -> object:
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise GatewayError(400, "tool_choice.type must be auto, any, tool or none", param="tool_choice")


def _mapping(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GatewayError(400, f"{param} must be an object", param=param)
    return cast(Mapping[str, Any], value)


def _list(value: object, param: str) -> list[object]:
    if not isinstance(value, list):
        raise GatewayError(400, f"{param} must be a list", param=param)
    return cast(list[object], value)


# -- replies ------------------------------------------------------------------------------------


def message_from_chat(answer: Json, message_id: str) -> Json:
    """A whole chat completion as a Messages API message."""
    choice: Json = answer["choices"][0]
    chat_message: Json = choice.get("message") or {}
    content: list[Json] = []
    if chat_message.get("content"):
        content.append({"type": "text", "text": chat_message["content"]})
    for call in chat_message.get("tool_calls") or ():
        content.append(_tool_use(call))
    usage: Json = answer.get("usage") or {}
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": answer.get("model"),
        "content": content,
        "stop_reason": _STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)},
    }


def _tool_use(call: Mapping[str, Any]) -> Json:
    function: Json = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = {}
    return {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments}


class MessageStream:
    """Turns chat completion chunks into Anthropic's stream events, one content block at a time."""

    def __init__(self, model: str, message_id: str) -> None:
        self.model = model
        self.message_id = message_id
        self.started = False
        self._block: str | None = None
        self._index = -1
        self._finish: str | None = None
        self._usage: Json = {}

    def feed(self, chunk: Json) -> list[Json]:
        """The events for one chunk. The first chunk starts the message; where it carries the prompt's
        token ids (the gateway leaves them in for this route), ``message_start`` reports its length."""
        events: list[Json] = []
        if not self.started:
            self.started = True
            prompt_ids: object = chunk.get("prompt_token_ids")
            if prompt_ids is None:
                prompt_ids = next((c.get("prompt_token_ids") for c in chunk.get("choices") or ()), None)
            events.append(self._start(len(cast(list[int], prompt_ids)) if isinstance(prompt_ids, list) else 0))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta: Json = choice.get("delta") or {}
            if delta.get("content"):
                events += self._open("text", {"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or ():
                function: Json = call.get("function") or {}
                if call.get("id") or function.get("name"):
                    events += self._open(
                        "tool",
                        {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": {}},
                        new=True,
                    )
                if function.get("arguments"):
                    events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return events

    def finish(self) -> list[Json]:
        events = [self._start()] if not self.started else []
        events += self._close()
        stop = _STOP_REASONS.get(str(self._finish), "end_turn")
        usage = {
            "input_tokens": self._usage.get("prompt_tokens", 0),
            "output_tokens": self._usage.get("completion_tokens", 0),
        }
        events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage})
        events.append({"type": "message_stop"})
        return events

    def _start(self, input_tokens: int = 0) -> Json:
        message: Json = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }
        return {"type": "message_start", "message": message}

    def _open(self, kind: str, block: Json, *, new: bool = False) -> list[Json]:
        if self._block == kind and not new:
            return []
        events = self._close()
        self._block, self._index = kind, self._index + 1
        events.append({"type": "content_block_start", "index": self._index, "content_block": block})
        return events

    def _close(self) -> list[Json]:
        if self._block is None:
            return []
        self._block = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _delta(self, delta: Json) -> Json:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}
