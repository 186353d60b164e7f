"""The Responses API (``POST /v1/responses``) served through the gateway's chat path.

Agents written for OpenAI's Responses API (the Agents SDK's default model) use the gateway like
Chat Completions clients do: each request is translated into a chat request, which the gateway
runs and records exactly as its own (one LLM span with token ids and logprobs), and the reply is
translated back, whole or as Responses stream events. The reply's id is the chat completion's, so
the LLM span's ``gen_ai.response.id`` is the id the framework sees.

The gateway keeps no conversation state: ``previous_response_id`` and ``conversation`` are
refused (send the whole conversation as ``input``), and so are stored prompts, background mode
and non-text content. Reasoning items in the input are dropped, as chat requests have no place for them.

Tools, as Codex CLI sends them:

- ``function`` tools become chat function tools.
- ``namespace`` tools (a named group of function tools) are flattened: each inner tool becomes a
  function tool named ``<namespace>__<name>`` (chat tool names allow letters, digits, ``_`` and
  ``-``), and a call the model makes to such a name comes back as a ``function_call`` item with the
  inner ``name`` and its ``namespace``, as the Responses API returns it; a ``function_call`` in the
  input that carries a ``namespace`` is sent to the model under the qualified name again.
- Hosted tools, which OpenAI's servers run and a local engine cannot (``web_search``,
  ``file_search``, ``code_interpreter``, ``image_generation``, ``computer_use_preview``, ``mcp``
  and their dated variants), are dropped: the model is not offered them, and the LLM span names
  them in ``relight.dropped_tools``. Only a request that forces one (``tool_choice`` naming a hosted
  tool, or ``required`` with nothing but hosted tools) is refused, with a 400 naming ``tool_choice``.
- Any other kind is refused with a 400 naming the tool.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.gateway.errors import GatewayError

__all__ = ["HOSTED_TOOLS", "ChatTranslation", "ResponseStream", "chat_request", "response_from_chat", "sse"]

Json = dict[str, Any]

_STATELESS = "the gateway keeps no conversation state; send the whole conversation as input"
_UNSERVED_FIELDS = {
    "previous_response_id": _STATELESS,
    "conversation": _STATELESS,
    "prompt": "stored prompts live on OpenAI's servers; send instructions and input instead",
    "background": "the gateway answers while the client waits",
}
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer_use",
        "mcp",
    }
)
"""Tool kinds OpenAI's servers run themselves: dropped from the request (and named on the span)."""
NAMESPACE_SEPARATOR = "__"


@dataclass(frozen=True, slots=True)
class ChatTranslation:
    """A Responses request as a chat request, and what the reply's translation must know about it."""

    chat: Json
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict[str, tuple[str, str]])
    """Qualified chat tool names of flattened namespace tools: ``{"ns__name": ("ns", "name")}``."""
    dropped_tools: list[str] = field(default_factory=list[str])
    """The hosted tool kinds that were dropped, in request order."""

    def span_attributes(self) -> dict[str, JsonValue]:
        """What the LLM span records about the translation beyond the chat request itself."""
        return {semconv.DROPPED_TOOLS: list[JsonValue](self.dropped_tools)} if self.dropped_tools else {}


# -- requests -----------------------------------------------------------------------------------


def chat_request(body: Json) -> ChatTranslation:
    """The chat completions request that asks what the Responses request ``body`` asks.

    Raises:
        GatewayError: 400, naming the field the gateway cannot serve.
    """
    for name, reason in _UNSERVED_FIELDS.items():
        if body.get(name):
            raise GatewayError(400, f"{name} is not supported: {reason}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "model is required (a model name the gateway serves)", param="model")
    messages: list[Json] = []
    instructions = body.get("instructions")
    if instructions:
        messages.append({"role": "system", "content": _text(instructions, "instructions")})
    messages += _messages(body.get("input"))
    chat: Json = {"model": model, "messages": messages}
    for name in ("temperature", "top_p", "parallel_tool_calls", "stream", "user", "seed"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    namespaced, dropped = _add_tools(body, chat)
    text_format = _mapping(body.get("text") or {}, "text").get("format")
    if text_format is not None and (response_format := _chat_response_format(text_format)) is not None:
        chat["response_format"] = response_format
    effort = _mapping(body.get("reasoning") or {}, "reasoning").get("effort")
    if effort is not None:
        chat["reasoning_effort"] = effort
    return ChatTranslation(chat, namespaced, dropped)


def _add_tools(body: Json, chat: Json) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Put the request's tools and tool_choice on ``chat`` as function tools; returns the namespaced and dropped.

    ``namespace`` tools are flattened to function tools with qualified names; hosted tools the engine
    cannot run are dropped, and refused only when ``tool_choice`` forces one.
    """
    tools: list[Json] = []
    namespaced: dict[str, tuple[str, str]] = {}
    dropped: list[str] = []
    for index, tool in enumerate(_list(body.get("tools") or [], "tools")):
        tools += _chat_tools(tool, f"tools[{index}]", namespaced, dropped)
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        choice = _chat_tool_choice(body["tool_choice"], dropped)
        if choice == "required" and not tools and dropped:
            raise GatewayError(
                400,
                f"tool_choice 'required' forces a hosted tool ({', '.join(dropped)}), which the gateway cannot run",
                param="tool_choice",
            )
        if tools:
            chat["tool_choice"] = choice
    return namespaced, dropped


def _messages(items: object) -> list[Json]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise GatewayError(400, "input is required: a string or a list of input items", param="input")
    messages: list[Json] = []
    for index, raw in enumerate(cast(list[object], items)):
        param = f"input[{index}]"
        item = _mapping(raw, param)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise GatewayError(400, f"{param}.role must be user, assistant, system or developer", param=param)
            content = _text(item.get("content"), f"{param}.content")
            messages.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            name = item.get("name")
            if item.get("namespace"):
                name = f"{item['namespace']}{NAMESPACE_SEPARATOR}{name}"
            call = {
                "id": _call_id(item, param),
                "type": "function",
                "function": {"name": name, "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                # The Responses API splits one assistant turn into a message and its calls.
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _text(output, f"{param}.output")
            messages.append({"role": "tool", "tool_call_id": _call_id(item, param), "content": content})
        elif kind != "reasoning":
            raise GatewayError(
                400,
                f"{param} is a {kind!r} item; the gateway serves messages, function calls and their outputs",
                param=param,
            )
    return messages


def _call_id(item: Mapping[str, Any], param: str) -> str:
    """The ``call_id`` that pairs a function call with its output; chat servers refuse a tool turn without one."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise GatewayError(
            400,
            f"{param}.call_id is required: a {item.get('type')} item names the call it belongs to",
            param=f"{param}.call_id",
        )
    return call_id


def _text(content: object, param: str) -> str:
    """Text content: a string, or text parts joined as OpenAI joins them."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise GatewayError(400, f"{param} must be a string or a list of text parts", param=param)
    texts: list[str] = []
    for index, raw in enumerate(cast(list[object], content)):
        part = _mapping(raw, f"{param}[{index}]")
        key = _TEXT_PARTS.get(str(part.get("type")))
        if key is None:
            raise GatewayError(
                400, f"{param}[{index}] is {part.get('type')!r} content; the gateway serves text only", param=param
            )
        texts.append(str(part.get(key, "")))
    return "".join(texts)


def _chat_tools(tool: object, param: str, namespaced: dict[str, tuple[str, str]], dropped: list[str]) -> list[Json]:
    """The chat tools one Responses tool becomes: one, a namespace's several, or none for a hosted tool."""
    spec = _mapping(tool, param)
    kind = spec.get("type")
    if kind == "function":
        return [_chat_function(spec)]
    if kind == "namespace":
        namespace = spec.get("name")
        if not isinstance(namespace, str) or not namespace:
            raise GatewayError(400, f"{param}.name: a namespace tool needs a name", param=f"{param}.name")
        tools: list[Json] = []
        for index, inner in enumerate(_list(spec.get("tools") or [], f"{param}.tools")):
            where = f"{param}.tools[{index}]"
            inner_spec = _mapping(inner, where)
            if inner_spec.get("type") != "function" or not isinstance(inner_spec.get("name"), str):
                raise GatewayError(400, f"{where}: a namespace holds function tools only", param=where)
            qualified = f"{namespace}{NAMESPACE_SEPARATOR}{inner_spec['name']}"
            namespaced[qualified] = (namespace, str(inner_spec["name"]))
            tools.append(_chat_function({**inner_spec, "name": qualified}))
        return tools
    if kind in HOSTED_TOOLS:
        dropped.append(str(kind))
        return []
    raise GatewayError(
        400,
        f"{param} is a {kind!r} tool; the gateway serves function and namespace tools, and drops hosted ones "
        f"({', '.join(sorted(HOSTED_TOOLS))})",
        param=param,
    )


def _chat_function(spec: Mapping[str, Any]) -> Json:
    function = {key: spec[key] for key in ("name", "description", "parameters", "strict") if key in spec}
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: object, dropped: list[str]) -> object:
    if isinstance(choice, str):
        return choice
    spec = _mapping(choice, "tool_choice")
    kind = spec.get("type")
    if kind in HOSTED_TOOLS:
        raise GatewayError(
            400, f"tool_choice forces the hosted tool {kind!r}, which the gateway cannot run", param="tool_choice"
        )
    if kind != "function":
        raise GatewayError(400, "tool_choice must be auto, none, required or a function", param="tool_choice")
    name = spec.get("name")
    if spec.get("namespace"):
        name = f"{spec['namespace']}{NAMESPACE_SEPARATOR}{name}"
    return {"type": "function", "function": {"name": name}}


def _chat_response_format(text_format: object) -> Json | None:
    spec = _mapping(text_format, "text.format")
    kind = spec.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {key: spec[key] for key in ("name", "schema", "strict", "description") if key in spec}
        return {"type": "json_schema", "json_schema": schema}
    raise GatewayError(400, "text.format.type must be text, json_object or json_schema", param="text.format")


def _mapping(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GatewayError(400, f"{param} must be an object", param=param)
    return cast(Mapping[str, Any], value)


def _object(value: object) -> Json:
    return cast(Json, value) if isinstance(value, dict) else {}


def _objects(value: object) -> list[Json]:
    return (
        [cast(Json, item) for item in cast(list[object], value) if isinstance(item, dict)]
        if isinstance(value, list)
        else []
    )


def _list(value: object, param: str) -> list[object]:
    if not isinstance(value, list):
        raise GatewayError(400, f"{param} must be a list", param=param)
    return cast(list[object], value)


# -- replies ------------------------------------------------------------------------------------


def response_from_chat(request: Json, chat: Json, namespaced: Mapping[str, tuple[str, str]] | None = None) -> Json:
    """The Responses reply to ``request``, from the gateway's chat completion ``chat``; calls to a
    flattened namespace tool (``namespaced``, from :class:`ChatTranslation`) name their namespace again."""
    choice = chat["choices"][0]
    message = choice["message"]
    response_id = str(chat["id"])
    output: list[Json] = []
    if message.get("content"):
        output.append(_message_item(response_id, message["content"], "completed"))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        item = _call_item(response_id, index, call["id"], function["name"], function["arguments"], "completed")
        output.append(_namespaced(item, namespaced or {}))
    return _response(request, chat, output, choice.get("finish_reason"), chat.get("usage"))


def _response(
    request: Json, head: Json, output: list[Json], finish_reason: object, usage: object, error: Json | None = None
) -> Json:
    """A Response object; ``status`` is in_progress until the finish reason is known, failed with an ``error``."""
    if error is not None:
        status = "failed"
    else:
        status = "in_progress" if finish_reason is None else "incomplete" if finish_reason == "length" else "completed"
    return {
        "id": head["id"],
        "object": "response",
        "created_at": head.get("created") or int(time.time()),
        "model": head.get("model") or request.get("model"),
        "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "metadata": request.get("metadata") or {},
        "usage": _usage(usage),
    }


def _usage(chat_usage: object) -> Json | None:
    if not isinstance(chat_usage, dict):
        return None
    counts = cast(Json, chat_usage)
    return {
        "input_tokens": counts.get("prompt_tokens", 0),
        "output_tokens": counts.get("completion_tokens", 0),
        "total_tokens": counts.get("total_tokens", 0),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _message_item(response_id: str, text: str, status: str) -> Json:
    content = [_text_part(text)] if status == "completed" else []
    return {"type": "message", "id": f"msg_{response_id}", "status": status, "role": "assistant", "content": content}


def _text_part(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(response_id: str, index: int, call_id: str, name: str, arguments: str, status: str) -> Json:
    return {
        "type": "function_call",
        "id": f"fc_{response_id}_{index}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _namespaced(item: Json, namespaced: Mapping[str, tuple[str, str]]) -> Json:
    """A function call item to a flattened namespace tool, named as the client declared it."""
    if item["name"] in namespaced:
        namespace, name = namespaced[item["name"]]
        return {**item, "name": name, "namespace": namespace}
    return item


class ResponseStream:
    """Chat completion chunks in, Responses stream events out, one output item at a time.

    Feed every chunk of one chat stream to :meth:`feed`, then call :meth:`finish` (or :meth:`fail`
    when the chat stream broke off); each returns the events to send, in order, numbered as the API
    numbers them.
    """

    def __init__(self, request: Json, namespaced: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.request = request
        self.namespaced = namespaced or {}
        self._head: Json | None = None
        self._output: list[Json] = []
        self._open: Json | None = None
        """The item being streamed; its text or arguments so far are in ``_buffer``."""
        self._buffer: list[str] = []
        self._call_index: int | None = None
        self._finish_reason: object = None
        self._usage: object = None
        self._sequence = 0

    def feed(self, chunk: Json) -> list[Json]:
        events: list[Json] = []
        if self._head is None:
            self._head = {"id": chunk["id"], "created": chunk.get("created"), "model": chunk.get("model")}
            events.append(self._event("response.created", response=self._snapshot()))
            events.append(self._event("response.in_progress", response=self._snapshot()))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in _objects(chunk.get("choices")):
            delta = _object(choice.get("delta"))
            text: object = delta.get("content")
            if isinstance(text, str) and text:
                events += self._text_delta(text)
            for call in _objects(delta.get("tool_calls")):
                events += self._call_delta(call)
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
        return events

    def _text_delta(self, text: str) -> list[Json]:
        events: list[Json] = []
        if self._open is None or self._open["type"] != "message":
            events += self._close()
            events += self._open_item(_message_item(self._response_id, "", "in_progress"))
            events.append(self._event("response.content_part.added", **self._where(), part=_text_part("")))
        self._buffer.append(text)
        events.append(self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[]))
        return events

    def _call_delta(self, call: Json) -> list[Json]:
        events: list[Json] = []
        index = int(call.get("index") or 0)
        function = _object(call.get("function"))
        if self._open is None or self._call_index != index:
            events += self._close()
            self._call_index = index
            name = str(function.get("name") or "")
            events += self._open_item(
                _namespaced(
                    _call_item(self._response_id, index, str(call.get("id")), name, "", "in_progress"), self.namespaced
                )
            )
        fragment: object = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            self._buffer.append(fragment)
            events.append(self._event("response.function_call_arguments.delta", **self._where(), delta=fragment))
        return events

    @property
    def _response_id(self) -> str:
        assert self._head is not None
        return str(self._head["id"])

    def finish(self) -> list[Json]:
        """The closing events: the last item done and ``response.completed`` (or ``response.incomplete``)."""
        if self._head is None:
            raise ValueError("the chat stream ended before its first chunk")
        events = self._close()
        response = _response(self.request, self._head, self._output, self._finish_reason or "stop", self._usage)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=response))
        return events

    @property
    def started(self) -> bool:
        """Whether events have been made: from then on a failure must be told in the stream."""
        return self._head is not None

    def fail(self, message: str, code: str | None = None) -> list[Json]:
        """The closing event when the chat stream broke off: ``response.failed``, with the items done so far."""
        assert self._head is not None, "a stream that has not started fails with an HTTP error instead"
        error = {"code": code or "server_error", "message": message}
        response = _response(self.request, self._head, self._output, None, self._usage, error)
        return [self._event("response.failed", response=response)]

    def _open_item(self, item: Json) -> list[Json]:
        self._open = item
        self._buffer = []
        return [self._event("response.output_item.added", output_index=len(self._output), item=item)]

    def _close(self) -> list[Json]:
        item = self._open
        if item is None:
            return []
        text = "".join(self._buffer)
        where = self._where()
        if item["type"] == "message":
            done = {**item, "status": "completed", "content": [_text_part(text)]}
            events = [
                self._event("response.output_text.done", **where, text=text, logprobs=[]),
                self._event("response.content_part.done", **where, part=_text_part(text)),
            ]
        else:
            done = {**item, "status": "completed", "arguments": text}
            events = [self._event("response.function_call_arguments.done", **where, arguments=text)]
        events.append(self._event("response.output_item.done", output_index=len(self._output), item=done))
        self._output.append(done)
        self._open = None
        self._call_index = None
        return events

    def _where(self) -> Json:
        assert self._open is not None
        where: Json = {"item_id": self._open["id"], "output_index": len(self._output)}
        if self._open["type"] == "message":
            where["content_index"] = 0
        return where

    def _snapshot(self) -> Json:
        assert self._head is not None
        return _response(self.request, self._head, [], None, None)

    def _event(self, kind: str, **fields: Any) -> Json:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event


def sse(event: Json) -> bytes:
    """One server-sent event as the Responses API frames it."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
