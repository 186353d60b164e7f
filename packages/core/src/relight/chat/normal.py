"""The normal form of a conversation: OpenAI chat messages and OpenAI function tools.

Tracers write tool definitions in several shapes: OpenAI's request shape
(``{"type": "function", "function": {"name", "description", "parameters"}}``, as OpenInference
keeps it), the GenAI conventions' flat one (``{"type": "function", "name", "description",
"parameters"}``, as OpenLLMetry and the OpenTelemetry GenAI utilities write it), or a bare function.
:func:`normal_tool` makes each the request shape with its fields in one order and nothing a tracer
may leave out (an empty description, empty parameters, OpenAI's ``strict`` flag), so one app gives
one prompt whichever tracer recorded it. Messages are rendered as chat templates expect them:
null content is ``""``, text parts are joined, tool-call arguments are objects.

Tool calls in the hermes format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) are
what Qwen, Hermes and relight's tiny model write; :mod:`relight.chat.render` writes them for
templates that do not render tool calls themselves, and relight-torch's engine parses them back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "arguments_as_objects",
    "arguments_text",
    "normal_tool",
    "normal_tools",
    "plain_message",
    "text_of",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_FUNCTION_FIELDS = ("name", "description", "parameters")


def normal_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Each tool in OpenAI's request shape (see :func:`normal_tool`)."""
    return [normal_tool(tool) for tool in tools or ()]


def normal_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One tool definition, in whatever shape a tracer wrote it, as ``{"type": "function", "function": {...}}``.

    A tool of another type (a hosted ``web_search``) is returned as it is: it has no function to render.
    """
    kind = tool.get("type", "function")
    nested = tool.get("function")
    if kind != "function" and not isinstance(nested, Mapping):
        return dict(tool)
    function = cast(Mapping[str, Any], nested) if isinstance(nested, Mapping) else tool
    normal: dict[str, Any] = {}
    for key in _FUNCTION_FIELDS:
        value = function.get(key)
        if key == "parameters" and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        if value not in (None, "", {}):
            normal[key] = value
    return {"type": "function", "function": normal}


def text_of(content: Any) -> str:
    """A message's content as text: null is empty, a list of parts is its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(cast(Mapping[str, Any], part).get("text", ""))
            for part in cast(list[Any], content)
            if isinstance(part, Mapping)
        )
    return str(content)


def plain_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI message with text content, as chat templates expect (null is empty, parts are joined)."""
    content = message.get("content")
    if content is None or isinstance(content, list):
        return {**message, "content": text_of(content)}
    return dict(message)


def arguments_as_objects(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages with each tool call's JSON-string ``arguments`` decoded, as Hugging Face templates expect."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        converted.append(
            {**message, "tool_calls": [_decoded(call) for call in cast(list[Any], calls)]} if calls else dict(message)
        )
    return converted


def _decoded(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = cast(Mapping[str, Any], call)
    function = call.get("function")
    if not isinstance(function, Mapping) or not isinstance(cast(Mapping[str, Any], function).get("arguments"), str):
        return dict(call)
    function = cast(Mapping[str, Any], function)
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        return dict(call)
    return {**call, "function": {**function, "arguments": arguments}}


def arguments_text(arguments: Any) -> str:
    """Arguments as the model would have written them: a JSON object (OpenAI sends them as a JSON string)."""
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments))
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments if arguments is not None else {})
