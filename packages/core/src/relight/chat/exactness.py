"""Whether token ids made from a call's record hold everything the call was: the one exactness check.

A call recorded as text (an imported trace, an upstream that gave no ids) is rendered again with the
policy's tokenizer and chat template (:mod:`relight.chat.render`). That can lose what the call said:
a template may drop tool calls or tools, trim a message, cannot show an image, or renders the history
differently once the answer follows it; a tokenizer may normalise text; the record itself may lack the
text (a tracer with content capture off). :func:`retokenize` makes the ids and checks each of these,
so a call is *exact* only when its ids hold its text, tool calls, tool results and tools; otherwise
each :class:`Mismatch` names what is wrong (an :class:`Inexact` code and the detail in words).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from relight.chat.normal import normal_tools, text_of
from relight.chat.render import ChatTokenizer, assistant_turn, render, render_text

__all__ = ["Inexact", "Mismatch", "Retokenized", "recorded_mismatches", "retokenize"]


class Inexact(StrEnum):
    """Why a call's token ids are not exactly what the model saw and produced."""

    TEXT_MISSING = "text_missing"
    """The record lacks a message's text (the tracer's content capture was off, or its events never arrived)."""
    TOOLS_MISSING = "tools_missing"
    """The call used tools but the record holds no tool definitions, so the prompt lacks them."""
    TOOL_CALLS_NOT_RENDERED = "tool_calls_not_rendered"
    """A tool call (a name or an argument) does not appear in the rendered tokens."""
    TOOLS_NOT_RENDERED = "tools_not_rendered"
    """A tool definition does not appear in the rendered prompt."""
    TOOL_RESULTS_NOT_RENDERED = "tool_results_not_rendered"
    """A tool result's text does not appear in the rendered prompt."""
    TEXT_NOT_RENDERED = "text_not_rendered"
    """A message's text does not appear in the rendered tokens (the template trims or drops it)."""
    CONTENT_NOT_TEXT = "content_not_text"
    """A message holds content a text template cannot render (an image, audio)."""
    PROMPT_NOT_PREFIX = "prompt_not_prefix"
    """The template renders the history differently once the answer follows it."""
    NOT_REVERSIBLE = "not_reversible"
    """The tokenizer does not decode its ids back to the rendered text."""
    TRUNCATED = "truncated"
    """The answer stopped at its token limit, but its rendering ends the turn as the model never did."""
    NO_TEXT = "no_text"
    """The record holds no request or no answer at all: there is nothing to render."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One way a call's ids differ from the call."""

    reason: Inexact
    detail: str


@dataclass(frozen=True, slots=True)
class Retokenized:
    """One call's token ids, and every way they fail to be exactly the call (none: exact)."""

    prompt_ids: list[int]
    response_ids: list[int]
    mismatches: tuple[Mismatch, ...] = ()

    @property
    def exact(self) -> bool:
        return not self.mismatches

    @property
    def reasons(self) -> list[str]:
        """The :class:`Inexact` codes, each once, in the order found."""
        return list(dict.fromkeys(m.reason.value for m in self.mismatches))

    @property
    def mismatch(self) -> str | None:
        """Every mismatch in words, or None for an exact call."""
        return "; ".join(f"{m.reason.value}: {m.detail}" for m in self.mismatches) or None


def retokenize(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    answer: Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    truncated: bool = False,
    known: Iterable[Mismatch] = (),
) -> Retokenized:
    """The ids of ``answer`` after ``messages`` (with ``tools``) under the tokenizer's template, checked.

    Args:
        truncated: the answer stopped at its token limit (finish reason ``length``).
        known: mismatches the caller found in the record itself (text it lacks), listed first.
    """
    listed = normal_tools(tools)
    problems = [*known, *recorded_mismatches(messages, answer, listed)]
    prompt_text = render_text(tokenizer, messages, tools=listed, add_generation_prompt=True)
    whole_text = render_text(tokenizer, [*messages, answer], tools=listed)
    try:
        prompt_ids, response_ids = assistant_turn(tokenizer, messages, answer, tools=listed)
    except ValueError:
        problems.append(
            Mismatch(Inexact.PROMPT_NOT_PREFIX, "the template renders the history differently once the answer follows")
        )
        prompt_ids = render(tokenizer, messages, tools=listed, add_generation_prompt=True)
        reply_text = text_of(answer.get("content")) + "".join(json.dumps(_function(call)) for call in _calls(answer))
        response_ids = _encode(tokenizer, reply_text)
    else:
        reply_text = whole_text[len(prompt_text) :] if whole_text.startswith(prompt_text) else ""
        if _decode(tokenizer, prompt_ids) != prompt_text or _decode(tokenizer, response_ids) != reply_text:
            problems.append(
                Mismatch(Inexact.NOT_REVERSIBLE, "the tokenizer does not decode its ids to the rendered text")
            )
    problems += _missing_texts(messages, prompt_text)
    problems += _missing_texts([answer], reply_text, answer=True)
    problems += _missing_calls(messages, prompt_text, "message")
    problems += _missing_calls([answer], reply_text, "the answer")
    problems += [
        Mismatch(Inexact.TOOLS_NOT_RENDERED, f"tool {name!r} does not appear in the rendered prompt")
        for tool in listed
        if (name := str(tool.get("function", {}).get("name", ""))) and name not in prompt_text
    ]
    if truncated:
        problems.append(
            Mismatch(Inexact.TRUNCATED, "the answer stopped at its token limit, yet its rendering ends the turn")
        )
    return Retokenized(prompt_ids, response_ids, tuple(problems))


def recorded_mismatches(
    messages: Sequence[Mapping[str, Any]], answer: Mapping[str, Any], tools: Sequence[Mapping[str, Any]] | None
) -> list[Mismatch]:
    """What makes a call inexact whatever the tokenizer: content no text template renders, tool calls without tools."""
    problems = _not_text(messages, answer)
    if not tools and _uses_tools([*messages, answer]):
        problems.append(
            Mismatch(Inexact.TOOLS_MISSING, "the call made or answered tool calls but its record holds no tools")
        )
    return problems


def _not_text(messages: Sequence[Mapping[str, Any]], answer: Mapping[str, Any]) -> list[Mismatch]:
    found: list[Mismatch] = []
    for label, message in [*((f"message {i}", m) for i, m in enumerate(messages)), ("the answer", answer)]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kinds = sorted(
            {str(cast(Mapping[str, Any], p).get("type")) for p in cast(list[Any], content) if isinstance(p, Mapping)}
            - {"text"}
        )
        if kinds:
            found.append(
                Mismatch(
                    Inexact.CONTENT_NOT_TEXT,
                    f"{label} ({message.get('role')}) holds {', '.join(kinds)} content a text template cannot render",
                )
            )
    return found


def _uses_tools(messages: Iterable[Mapping[str, Any]]) -> bool:
    return any(_calls(m) or m.get("role") == "tool" for m in messages)


def _calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [cast(Mapping[str, Any], c) for c in cast(list[Any], calls) if isinstance(c, Mapping)]


def _function(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    return dict(cast(Mapping[str, Any], function)) if isinstance(function, Mapping) else {}


def _missing_texts(messages: Sequence[Mapping[str, Any]], rendered: str, *, answer: bool = False) -> list[Mismatch]:
    """Each message whose text is not found in the rendering, in order."""
    found: list[Mismatch] = []
    cursor = 0
    for index, message in enumerate(messages):
        text = text_of(message.get("content"))
        at = rendered.find(text, cursor)
        if at >= 0:
            cursor = at + len(text)
            continue
        role = message.get("role")
        label = "the answer" if answer else f"message {index} ({role})"
        reason = Inexact.TOOL_RESULTS_NOT_RENDERED if role == "tool" else Inexact.TEXT_NOT_RENDERED
        found.append(Mismatch(reason, f"{label}'s text does not appear in the rendered tokens"))
    return found


def _missing_calls(messages: Sequence[Mapping[str, Any]], rendered: str, what: str) -> list[Mismatch]:
    """Each tool call whose name, or one of whose argument names, the rendering lacks."""
    found: list[Mismatch] = []
    for index, message in enumerate(messages):
        for call in _calls(message):
            function = _function(call)
            name = str(function.get("name") or "")
            arguments: Any = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {}
            keys = [str(k) for k in cast(dict[str, Any], arguments)] if isinstance(arguments, dict) else []
            if name not in rendered or not all(_quoted(key) in rendered or json.dumps(key) in rendered for key in keys):
                label = what if what == "the answer" else f"{what} {index}"
                detail = f"{label}'s call of {name!r} does not appear in the rendered tokens"
                found.append(Mismatch(Inexact.TOOL_CALLS_NOT_RENDERED, detail))
    return found


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _encode(tokenizer: ChatTokenizer, text: str) -> list[int]:
    return [int(i) for i in cast(Sequence[Any], tokenizer.encode(text, add_special_tokens=False))]


def _decode(tokenizer: ChatTokenizer, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
