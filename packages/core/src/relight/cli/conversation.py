"""``relight show --text``: what the model was asked and what it answered, call by call.

Token counts say how long a call was, not what went wrong; reading the messages does. Each LLM
span of each attempt is printed with its role, the request's messages and the response, from the
``gen_ai.input.messages`` / ``gen_ai.output.messages`` the gateway recorded, in full.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from rich.console import Console
from rich.markup import escape

from relight import semconv
from relight.records import Attempt, Span, SpanKind
from relight.transitions.verdicts import call_numbers

__all__ = ["print_conversations"]


def print_conversations(console: Console, attempts: Sequence[Attempt], spans: Sequence[Span]) -> None:
    """Every LLM call of every attempt, in order, with its messages and response."""
    roles = {s.span_id: s.attributes.get(semconv.ROLE) for s in spans if s.kind is SpanKind.ROLE}
    numbers = call_numbers(spans)  # as the verdicts below number them
    for attempt in attempts:
        console.print(f"[bold]attempt {attempt.number}[/] {attempt.attempt_id}  {attempt.status.value}")
        calls = sorted(
            (s for s in spans if s.attempt_id == attempt.attempt_id and s.kind is SpanKind.LLM),
            key=lambda s: s.start_time,
        )
        for span in calls:
            role = span.attributes.get(semconv.ROLE) or roles.get(span.parent_id or "")
            title = f"call {numbers[span.span_id]}" + (f"  role {role}" if role else "") + f"  ({span.name})"
            console.print(f"[bold cyan]── {escape(title)}[/]")
            for message in _messages(span.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)):
                _print_message(console, message)
            if span.status_code == "ERROR":
                console.print(f"[red]error: {escape(span.status_message or '')}[/]")
            for message in _messages(span.attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES)):
                _print_message(console, message, answer=True)
            if isinstance(cause := span.attributes.get(semconv.IMPORT_MISSING_TEXT_CAUSE), str):
                lacking = span.attributes.get(semconv.IMPORT_MISSING_TEXT)
                what = ", ".join(map(str, cast(list[Any], lacking))) if isinstance(lacking, list) else "its messages"
                console.print(f"[yellow]text missing: {escape(what)}: {escape(cause)}[/]", soft_wrap=True)


def _messages(text: Any) -> list[dict[str, Any]]:
    if not isinstance(text, str):
        return []
    try:
        value: Any = json.loads(text)
    except ValueError:
        return [{"role": "?", "content": text}]
    if isinstance(value, str):  # a completion's prompt or text
        return [{"role": "prompt", "content": value}]
    if not isinstance(value, list):
        return []
    return [cast(dict[str, Any], m) for m in cast(list[Any], value) if isinstance(m, dict)]


def _print_message(console: Console, message: dict[str, Any], *, answer: bool = False) -> None:
    content: Any = message.get("content")
    if isinstance(content, list):
        content = "".join(str(cast(dict[str, Any], p).get("text", "")) for p in cast(list[Any], content))
    text = "" if content is None else str(content)
    for call in cast(list[Any], message.get("tool_calls") or []):
        function: dict[str, Any] = cast(dict[str, Any], call).get("function") or {}
        text += f"\n→ tool call {function.get('name')}({function.get('arguments')})"
    label = "answer" if answer else str(message.get("role", "?"))
    style = "bold green" if answer else "bold"
    console.print(f"[{style}]{escape(label)}:[/] {escape(text)}", highlight=False, soft_wrap=True)
