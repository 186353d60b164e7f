"""A rollout as a judge reads it: the task, the conversation with its tool calls and results, the final answer.

Everything comes from the store's spans, so any framework renders alike: the gateway records each
LLM call's request messages and response (OpenAI chat format, whatever API the agent spoke), and a
later call's request holds the tool results of the calls before it. The calls of one attempt are
read in order; a message already shown (the history each request repeats) is shown once. System
messages are left out: the agent's instructions are the same for every rollout of a group, and the
judge's rubric says what matters. So is a call that a client gave up on and sent again unchanged (the
same request, started before the first one ended: a retry after a client-side timeout), whose reply
the agent never saw.

The text is trimmed to a budget of characters (about four per token): the final answer (the last
call's text, cut in its middle to a third of the budget) always stands at the end; each message
before it is cut in its middle to a third of the budget, and when the whole is still too long the
earliest messages but the first (the task as the agent received it) give way, with a line saying
how many were left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.records import Span, SpanKind

__all__ = [
    "DEFAULT_MAX_CHARS",
    "RenderedRollout",
    "answered_calls",
    "content_text",
    "conversation",
    "render_rollout",
    "span_messages",
    "task_text",
    "trim",
]

DEFAULT_MAX_CHARS = 6000
"""Characters of one rollout a judge sees by default: about 1,500 tokens."""

_NO_ANSWER = "(no final answer: the last call answered with no text)"


@dataclass(frozen=True, slots=True)
class RenderedRollout:
    """One rollout as text for a judge, and the parts a gate reads (``final_answer``)."""

    rollout_id: str
    lines: tuple[str, ...]
    """The conversation, one entry per message, tool call or tool result, before trimming."""
    final_answer: str
    """The text of the last LLM call's response; empty when it had none."""
    text: str
    """What the judge is shown: the trimmed conversation and the final answer."""


def render_rollout(rollout_id: str, spans: Iterable[Span], *, max_chars: int = DEFAULT_MAX_CHARS) -> RenderedRollout:
    """Render one attempt's spans (pass only that attempt's) as a judge reads them, within ``max_chars``."""
    calls = answered_calls(
        sorted((s for s in spans if s.kind is SpanKind.LLM and s.status_code != "ERROR"), key=_start)
    )
    lines = conversation(calls)
    answer = _final_answer(calls)
    closing = f"[final answer] {_cut(answer, max(200, max_chars // 3)) if answer else _NO_ANSWER}"
    body = lines[:-1] if answer and lines and lines[-1] == f"[assistant] {answer}" else lines  # said once, at the end
    text = trim(body, max_chars=max(max_chars - len(closing) - 1, 0))
    return RenderedRollout(rollout_id, tuple(lines), answer, f"{text}\n{closing}" if text else closing)


def conversation(calls: Sequence[Span]) -> list[str]:
    """The messages of LLM calls made in this order, each shown once, as ``[role] text`` lines."""
    seen: set[str] = set()
    lines: list[str] = []
    tool_names: dict[str, str] = {}
    """The tool each call id named, so a tool result says whose it is."""
    for call in calls:
        for message in (
            *span_messages(call, semconv.GEN_AI_INPUT_MESSAGES),
            *span_messages(call, semconv.GEN_AI_OUTPUT_MESSAGES),
        ):
            if message.get("role") in ("system", "developer"):
                continue
            key = _key(message)
            if key in seen:
                continue
            seen.add(key)
            for item in cast(list[Any], message.get("tool_calls") or []):
                if isinstance(item, dict) and (call_id := cast(dict[str, Any], item).get("id")):
                    tool_names[str(call_id)] = str(cast(dict[str, Any], item).get("function", {}).get("name", ""))
            lines += _lines(message, tool_names)
    return lines


def trim(lines: Sequence[str], *, max_chars: int) -> str:
    """``lines`` joined, each cut to a third of ``max_chars``, the earliest but the first dropped to fit."""
    if not lines:
        return ""
    cut = [_cut(line, max(200, max_chars // 3)) for line in lines]
    if sum(len(line) + 1 for line in cut) <= max_chars or len(cut) <= 2:
        return "\n".join(cut)
    head, kept, room = cut[0], list[str](), max_chars - len(cut[0]) - 60
    for line in reversed(cut[1:]):
        if len(line) + 1 > room:
            break
        kept.insert(0, line)
        room -= len(line) + 1
    dropped = len(cut) - 1 - len(kept)
    return "\n".join([head, f"[… {dropped} message(s) left out to fit the judge's budget …]", *kept])


def answered_calls(calls: Sequence[Span]) -> list[Span]:
    """The calls whose reply the agent got: one sent again unchanged before it ended (a client's retry after
    its timeout) gives way to the later one."""
    kept: list[Span] = []
    for call, after in zip(calls, [*calls[1:], None], strict=True):
        request = call.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)
        retried = (
            after is not None
            and request is not None
            and request == after.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)
            and after.start_time < call.end_time
        )
        if not retried:
            kept.append(call)
    return kept


def _start(span: Span) -> tuple[int, int]:
    return span.start_time, span.sequence_id or 0


def span_messages(span: Span, key: str) -> list[Mapping[str, Any]]:
    text = span.attributes.get(key)
    if not isinstance(text, str):
        return []
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return []
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return []
    return [cast(Mapping[str, Any], m) for m in cast(list[Any], parsed) if isinstance(m, dict)]


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast(list[Any], content)
        return "".join(str(cast(dict[str, Any], p).get("text", "")) for p in parts if isinstance(p, dict))
    return json.dumps(content, default=str)


def _arguments(raw: Any) -> str:
    """Tool-call arguments in one spelling, so a framework that re-serializes them is not shown twice."""
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), sort_keys=True, ensure_ascii=False)
        except ValueError:
            return raw
    return json.dumps(raw, sort_keys=True, ensure_ascii=False, default=str)


def _tool_calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []
    for call in cast(list[Any], message.get("tool_calls") or []):
        if isinstance(call, dict):
            function = cast(dict[str, Any], cast(dict[str, Any], call).get("function") or {})
            calls.append((str(function.get("name", "?")), _arguments(function.get("arguments", ""))))
    return calls


def _key(message: Mapping[str, Any]) -> str:
    role = str(message.get("role", ""))
    return json.dumps(
        [role, content_text(message.get("content")).strip(), _tool_calls(message), message.get("tool_call_id")]
    )


def _lines(message: Mapping[str, Any], tool_names: Mapping[str, str]) -> list[str]:
    role = str(message.get("role", "?"))
    text = content_text(message.get("content")).strip()
    if role == "tool":
        name = message.get("name") or tool_names.get(str(message.get("tool_call_id")))
        return [f"[tool result{f' of {name}' if name else ''}] {text}"]
    lines = [f"[{role}] {text}"] if text else []
    lines += [f"[{role} calls tool] {name}({arguments})" for name, arguments in _tool_calls(message)]
    return lines


def _final_answer(calls: Sequence[Span]) -> str:
    if not calls:
        return ""
    outputs = span_messages(calls[-1], semconv.GEN_AI_OUTPUT_MESSAGES)
    return "\n".join(text for m in outputs if (text := content_text(m.get("content")).strip()))


def _cut(text: str, limit: int) -> str:
    """``text`` cut in its middle to about ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 20)
    return f"{text[: keep // 2]} […{len(text) - keep} characters left out…] {text[-(keep - keep // 2) :]}"


def task_text(task: JsonValue) -> str:
    """The task as the judge reads it: a string as it is, anything else as JSON."""
    return task if isinstance(task, str) else json.dumps(task, ensure_ascii=False, default=str)
