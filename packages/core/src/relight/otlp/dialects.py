"""What a foreign GenAI span says, read in any of the three attribute dialects exporters use today.

- **OpenTelemetry GenAI semantic conventions**: ``gen_ai.operation.name``, ``gen_ai.input.messages``
  and ``gen_ai.output.messages`` (as JSON, in the ``parts`` shape of the current conventions or the
  OpenAI ``content`` shape), ``gen_ai.system_instructions``, and the older span events
  (``gen_ai.user.message``, ``gen_ai.choice``, ``gen_ai.content.prompt``/``completion``).
- **OpenInference** (Arize Phoenix): ``openinference.span.kind``, ``llm.input_messages.N.message.*``,
  ``llm.output_messages.N.message.*``, ``llm.model_name``, ``llm.token_count.*``, ``llm.tools.N.tool.json_schema``.
- **OpenLLMetry** (Traceloop): ``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*``, ``llm.request.type``,
  ``traceloop.span.kind`` and ``traceloop.entity.name``.

Each is read into one :class:`CallText`: OpenAI chat messages (what relight's gateway records and
what chat templates render) and tools in OpenAI's function shape (:func:`relight.chat.normal_tools`),
so a call means the same to relight whichever library traced it. GenAI events sent as OTLP log records
(the conventions' per-message events and ``gen_ai.client.inference.operation.details``) are read
like span events once the receiver has joined them to their span.

What the trace does not hold is said, never guessed: a message whose text was not recorded (content
capture off, a redacted value) or a tool call without its arguments is listed in
:attr:`CallText.missing_text`, and stands in the messages with empty text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import JsonValue

from relight.chat import normal_tools

__all__ = ["HIDDEN", "REDACTED", "CallText", "SpanEvent", "agent_name", "call_text", "is_llm_call", "is_tool_call"]

Message = dict[str, Any]

_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent"})
_OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
"""The GenAI conventions' event holding a whole call (messages, tools) as attributes."""
REDACTED = "__REDACTED__"
"""What OpenInference writes in place of a text its ``OPENINFERENCE_HIDE_*`` settings hide."""
HIDDEN = ", hidden by its tracer"
"""The end of a :attr:`CallText.missing_text` entry whose text the tracer replaced by a placeholder."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """An OpenTelemetry span event, attributes already plain JSON."""

    name: str
    time: int
    attributes: Mapping[str, JsonValue]


@dataclass(slots=True)
class CallText:
    """One LLM call's conversation, as OpenAI chat messages, with where each piece came from."""

    dialect: str
    """``gen_ai``, ``openinference`` or ``openllmetry``: the dialect the messages were read in."""
    input_messages: list[Message] = field(default_factory=list[Message])
    output_messages: list[Message] = field(default_factory=list[Message])
    tools: list[Message] = field(default_factory=list[Message])
    model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list[str])
    input_tokens: int | None = None
    output_tokens: int | None = None
    missing_text: list[str] = field(default_factory=list[str])
    """Each piece of the call whose text the trace does not hold: ``input message 1 (user)``, ``the answer``,
    ``the arguments of input message 2's call of 'search'``."""


def is_llm_call(attributes: Mapping[str, JsonValue]) -> bool:
    """Whether a span records one model call, in any dialect."""
    if attributes.get("gen_ai.operation.name") in _LLM_OPERATIONS:
        return True
    if str(attributes.get("openinference.span.kind", "")).upper() == "LLM":
        return True
    if attributes.get("llm.request.type") in {"chat", "completion"}:
        return True
    return any(key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in attributes)


def is_tool_call(attributes: Mapping[str, JsonValue]) -> bool:
    """Whether a span records one tool execution, in any dialect."""
    return (
        attributes.get("gen_ai.operation.name") == "execute_tool"
        or str(attributes.get("openinference.span.kind", "")).upper() == "TOOL"
        or attributes.get("traceloop.span.kind") == "tool"
    )


def agent_name(name: str, attributes: Mapping[str, JsonValue]) -> str | None:
    """The agent (or graph node) a span stands for, if it names one: what relight calls a role."""
    for key in ("gen_ai.agent.name", "agent.name"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    metadata = _json(attributes.get("metadata"))
    if isinstance(metadata, dict):
        node = cast(dict[str, Any], metadata).get("langgraph_node")
        if isinstance(node, str) and node:
            return node
    if str(attributes.get("openinference.span.kind", "")).upper() == "AGENT":
        return name
    if attributes.get("gen_ai.operation.name") in _AGENT_OPERATIONS:
        return name.removeprefix("invoke_agent ").strip() or None
    if attributes.get("traceloop.span.kind") in {"agent", "task"}:
        entity = attributes.get("traceloop.entity.name")
        return entity if isinstance(entity, str) and entity else None
    return None


def call_text(attributes: Mapping[str, JsonValue], events: Sequence[SpanEvent] = ()) -> CallText:
    """The call's messages, tools, model, usage and response id, from whichever dialect holds them."""
    flat = dict(attributes)
    if _has_prefix(flat, "llm.input_messages.") or _has_prefix(flat, "llm.output_messages."):
        text = _openinference(flat)
    elif _has_prefix(flat, "gen_ai.prompt.") or _has_prefix(flat, "gen_ai.completion."):
        text = _openllmetry(flat)
    else:
        text = _gen_ai(flat, events)
    text.model = text.model or _string(flat, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
    text.response_id = text.response_id or _string(flat, "gen_ai.response.id")
    text.input_tokens = _integer(
        flat, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"
    )
    text.output_tokens = _integer(
        flat, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"
    )
    reasons = flat.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and not text.finish_reasons:
        text.finish_reasons = [str(reason) for reason in cast(list[JsonValue], reasons)]
    if not text.tools:
        text.tools = _tool_definitions(flat)
    text.tools = normal_tools(text.tools)
    _settle(text)
    return text


def _settle(text: CallText) -> None:
    """List what the trace left out, and give it the empty text templates expect (see :attr:`CallText.missing_text`)."""
    text.missing_text = []
    for label, message in [
        *((f"input message {i}", m) for i, m in enumerate(text.input_messages)),
        *(("the answer", m) for m in text.output_messages[:1]),
    ]:
        role = message.get("role")
        calls = cast(list[Message], message.get("tool_calls") or [])
        content = message.get("content")
        if content is None or content == REDACTED:
            if not (calls and role == "assistant" and content is None):
                entry = label if label == "the answer" else f"{label} ({role})"
                text.missing_text.append(entry + (HIDDEN if content == REDACTED else ""))
            message["content"] = ""
        for call in calls:
            function = cast(Message, call.get("function") or {})
            if function.get("arguments") is None:
                text.missing_text.append(f"the arguments of {label}'s call of {function.get('name')!r}")
                function["arguments"] = "{}"
    for message in text.output_messages[1:]:
        if message.get("content") is None:
            message["content"] = ""


# -- OpenTelemetry GenAI semantic conventions ---------------------------------------------------------


def _gen_ai(flat: dict[str, JsonValue], events: Sequence[SpanEvent]) -> CallText:
    text = CallText("gen_ai")
    system = _json(flat.get("gen_ai.system_instructions"))
    if isinstance(system, list) and system:
        text.input_messages.append({"role": "system", "content": _parts_text(cast(list[Any], system))})
    elif isinstance(system, str) and system:
        text.input_messages.append({"role": "system", "content": system})
    inputs = _json(flat.get("gen_ai.input.messages"))
    outputs = _json(flat.get("gen_ai.output.messages"))
    if isinstance(inputs, list):
        text.input_messages += [
            _semconv_message(cast(Message, m)) for m in cast(list[Any], inputs) if isinstance(m, dict)
        ]
    if isinstance(outputs, list):
        for message in cast(list[Any], outputs):
            if isinstance(message, dict):
                text.output_messages.append(_semconv_message(cast(dict[str, Any], message)))
                reason = cast(dict[str, Any], message).get("finish_reason")
                if isinstance(reason, str):
                    text.finish_reasons.append(reason)
    if not text.input_messages and not text.output_messages:
        _gen_ai_events(text, events)
    for event in events:
        if event.name == _OPERATION_DETAILS and not text.tools:
            text.tools = _tool_definitions(dict(event.attributes))
    return text


def _semconv_message(message: dict[str, Any]) -> Message:
    """A message in the conventions' ``parts`` shape, or already in OpenAI's, as an OpenAI message."""
    if "parts" not in message:
        return {k: v for k, v in message.items() if k != "finish_reason"}
    role = str(message.get("role", "user"))
    texts: list[str] = []
    calls: list[Message] = []
    other: list[Any] = []
    result: Message = {"role": role}
    for part in cast(list[Any], message.get("parts") or []):
        if not isinstance(part, dict):
            continue
        part = cast(dict[str, Any], part)
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            calls.append(_tool_call(part.get("id"), part.get("name"), part.get("arguments")))
        elif kind == "tool_call_response":
            result["role"] = "tool"
            result["tool_call_id"] = part.get("id")
            response = part.get("response")
            if response is not None:
                texts.append(response if isinstance(response, str) else json.dumps(response))
        else:
            other.append(part)
    if other:
        result["content"] = [{"type": "text", "text": t} for t in texts] + other
    else:
        result["content"] = "".join(texts) if texts else None
    if calls:
        result["tool_calls"] = calls
    if message.get("name"):
        result["name"] = message["name"]
    return result


def _gen_ai_events(text: CallText, events: Sequence[SpanEvent]) -> None:
    """The conventions' events: one per message (as span events or log records), two holding JSON, or one whole call."""
    for event in events:
        attributes = event.attributes
        if event.name == _OPERATION_DETAILS:
            details = _gen_ai(dict(attributes), ())
            text.input_messages += details.input_messages
            text.output_messages += details.output_messages
            text.finish_reasons += details.finish_reasons
        elif event.name in {"gen_ai.content.prompt", "gen_ai.content.completion"}:
            key = "gen_ai.prompt" if event.name == "gen_ai.content.prompt" else "gen_ai.completion"
            listed = _json(attributes.get(key))
            if isinstance(listed, list):
                read = [_semconv_message(cast(Message, m)) for m in cast(list[Any], listed) if isinstance(m, dict)]
                (text.input_messages if key == "gen_ai.prompt" else text.output_messages).extend(read)
        elif event.name in {"gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message"}:
            text.input_messages.append(_message_event(event))
        elif event.name == "gen_ai.tool.message":
            text.input_messages.append(
                {"role": "tool", "content": _event_content(attributes), "tool_call_id": attributes.get("id")}
            )
        elif event.name == "gen_ai.choice":
            text.output_messages.append(_choice_event(attributes))
            if isinstance(attributes.get("finish_reason"), str):
                text.finish_reasons.append(str(attributes["finish_reason"]))


def _message_event(event: SpanEvent) -> Message:
    message: Message = {"role": event.name.split(".")[1], "content": _event_content(event.attributes)}
    calls = _json(event.attributes.get("tool_calls"))
    if isinstance(calls, list) and calls:
        message["tool_calls"] = [
            _openai_tool_call(cast(Message, c)) for c in cast(list[Any], calls) if isinstance(c, dict)
        ]
    return message


def _choice_event(attributes: Mapping[str, JsonValue]) -> Message:
    body = _json(attributes.get("message"))
    message = cast(dict[str, Any], body) if isinstance(body, dict) else {"content": _event_content(attributes)}
    content = message.get("content")
    choice: Message = {"role": "assistant", "content": content if isinstance(content, str) else None}
    if message.get("tool_calls"):
        choice["tool_calls"] = [
            _openai_tool_call(cast(Message, c)) for c in cast(list[Any], message["tool_calls"]) if isinstance(c, dict)
        ]
    return choice


def _event_content(attributes: Mapping[str, JsonValue]) -> str | None:
    """An event's text; None when it holds none (content capture off)."""
    content = attributes.get("content")
    return content if isinstance(content, str) else None if content is None else json.dumps(content)


# -- OpenInference --------------------------------------------------------------------------------------


def _openinference(flat: dict[str, JsonValue]) -> CallText:
    text = CallText("openinference")
    text.input_messages = [_openinference_message(m) for m in _indexed(flat, "llm.input_messages.")]
    text.output_messages = [_openinference_message(m) for m in _indexed(flat, "llm.output_messages.")]
    text.tools = [
        cast(Message, schema)
        for entry in _indexed(flat, "llm.tools.")
        if isinstance(schema := _json(entry.get("tool.json_schema")), dict)
    ]
    if isinstance(reason := flat.get("llm.finish_reason"), str):
        text.finish_reasons.append(reason)
    output = _json(flat.get("output.value")) if flat.get("output.mime_type") == "application/json" else None
    if isinstance(output, dict) and isinstance(answer_id := cast(dict[str, Any], output).get("id"), str):
        text.response_id = answer_id
    return text


def _openinference_message(entry: dict[str, JsonValue]) -> Message:
    message: Message = {"role": str(entry.get("message.role", "user")), "content": entry.get("message.content")}
    parts = _nested_list(entry, "message.contents.")
    if message["content"] is None and parts:
        texts = [str(p.get("message_content.text", "")) for p in parts if p.get("message_content.type") == "text"]
        message["content"] = "".join(texts)
    calls = _nested_list(entry, "message.tool_calls.")
    if calls:
        message["tool_calls"] = [
            _tool_call(
                call.get("tool_call.id"),
                call.get("tool_call.function.name"),
                call.get("tool_call.function.arguments"),
            )
            for call in calls
        ]
    if entry.get("message.tool_call_id"):
        message["tool_call_id"] = entry["message.tool_call_id"]
    if entry.get("message.name"):
        message["name"] = entry["message.name"]
    return message


# -- OpenLLMetry ----------------------------------------------------------------------------------------


def _openllmetry(flat: dict[str, JsonValue]) -> CallText:
    text = CallText("openllmetry")
    for entry in _indexed(flat, "gen_ai.prompt."):
        text.input_messages.append(_openllmetry_message(entry))
    for entry in _indexed(flat, "gen_ai.completion."):
        text.output_messages.append(_openllmetry_message(entry, default_role="assistant"))
        if isinstance(entry.get("finish_reason"), str):
            text.finish_reasons.append(str(entry["finish_reason"]))
    for entry in _indexed(flat, "llm.request.functions."):
        function: Message = {"name": entry.get("name"), "description": entry.get("description")}
        parameters = _json(entry.get("parameters"))
        if isinstance(parameters, dict):
            function["parameters"] = parameters
        text.tools.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return text


def _openllmetry_message(entry: dict[str, JsonValue], default_role: str = "user") -> Message:
    message: Message = {"role": str(entry.get("role", default_role)), "content": entry.get("content")}
    calls = _nested_list(entry, "tool_calls.")
    if calls:
        message["tool_calls"] = [_tool_call(c.get("id"), c.get("name"), c.get("arguments")) for c in calls]
    if entry.get("tool_call_id"):
        message["tool_call_id"] = entry["tool_call_id"]
    return message


# -- shared helpers -------------------------------------------------------------------------------------


def _tool_definitions(flat: dict[str, JsonValue]) -> list[Message]:
    tools = _json(flat.get("gen_ai.tool.definitions"))
    return [cast(Message, t) for t in cast(list[Any], tools) if isinstance(t, dict)] if isinstance(tools, list) else []


def _tool_call(call_id: Any, name: Any, arguments: Any) -> Message:
    """An OpenAI tool call; arguments as the JSON text OpenAI sends, however the dialect stored them (None: not
    recorded, see :func:`_settle`)."""
    text = arguments if isinstance(arguments, str) or arguments is None else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": str(name or ""), "arguments": text}}


def _openai_tool_call(call: dict[str, Any]) -> Message:
    function = cast(dict[str, Any], call.get("function") or {})
    return _tool_call(call.get("id"), function.get("name"), function.get("arguments"))


def _parts_text(parts: list[Any]) -> str:
    return "".join(str(cast(dict[str, Any], p).get("content", "")) for p in parts if isinstance(p, dict))


def _has_prefix(flat: Mapping[str, JsonValue], prefix: str) -> bool:
    return any(key.startswith(prefix) for key in flat)


def _indexed(flat: Mapping[str, JsonValue], prefix: str) -> list[dict[str, JsonValue]]:
    """``prefix.0.a``, ``prefix.0.b``, ``prefix.1.a`` as ``[{a, b}, {a}]``, in index order."""
    entries: dict[int, dict[str, JsonValue]] = {}
    for key, value in flat.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            entries.setdefault(int(index), {})[rest] = value
    return [entries[i] for i in sorted(entries)]


def _nested_list(entry: Mapping[str, JsonValue], prefix: str) -> list[dict[str, JsonValue]]:
    return _indexed(entry, prefix)


def _json(value: JsonValue | None) -> Any:
    """A JSON attribute's value: parsed from text when it is text, as-is when the exporter sent structure."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _string(flat: Mapping[str, JsonValue], *keys: str) -> str | None:
    for key in keys:
        value = flat.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _integer(flat: Mapping[str, JsonValue], *keys: str) -> int | None:
    for key in keys:
        value = flat.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
