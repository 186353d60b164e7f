"""Tool calls in the hermes format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

This is what Qwen, Hermes and the tiny model's template write, so a completion's text turns into
OpenAI ``tool_calls`` by finding these blocks. A block whose JSON does not parse, or that names
no tool, stays in the text: the agent sees what the model wrote, and RL learns from it.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import JsonValue

__all__ = ["TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "arguments_as_objects", "parse_tool_calls"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, JsonValue]]]:
    """Split a completion into its plain text and OpenAI-style ``tool_calls`` entries."""
    calls: list[dict[str, JsonValue]] = []

    def take(match: re.Match[str]) -> str:
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return match.group(0)
        arguments = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": body["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        return ""

    rest = _BLOCK.sub(take, text)
    return rest.strip() if calls else text, calls


def arguments_as_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with each tool call's JSON-string ``arguments`` decoded, as Hugging Face templates expect."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_decoded(call) for call in calls]}
        converted.append(message)
    return converted


def _decoded(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}
