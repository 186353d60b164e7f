"""Tool calls in the hermes format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

This is what Qwen, Hermes and the tiny model's template write (and what the core's renderer,
:mod:`relight.chat`, writes for a template that renders no tool calls), so a completion's text turns into
OpenAI ``tool_calls`` by finding these blocks. A block whose JSON does not parse, or that names
no tool, stays in the text: the agent sees what the model wrote, and RL learns from it.
"""

from __future__ import annotations

import json
import re
import uuid

from pydantic import JsonValue

from relight.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, arguments_as_objects

__all__ = ["TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "arguments_as_objects", "parse_tool_calls"]

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
