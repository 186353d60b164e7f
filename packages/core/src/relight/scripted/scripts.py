"""The scripted model's vocabulary: requests as a script sees them, the replies it gives, its tokenizer.

A script is any callable from a :class:`ScriptRequest` to a :class:`Reply` (or a plain string);
:class:`relight.scripted.server.ScriptedUpstream` serves what it answers. Token ids are known in
advance (one per character, its code point) so a test can compute what any reply must have been.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

__all__ = [
    "Endpoint",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptRequest",
    "ToolCall",
    "by_system_prompt",
    "decode",
    "echo",
    "encode",
    "logprob_of",
    "render_prompt",
    "render_tool_call",
    "turns",
]


Endpoint = Literal["chat", "completions"]


def encode(text: str) -> list[int]:
    """The scripted tokenizer: one token per character, its code point."""
    return [ord(char) for char in text]


def decode(token_ids: Sequence[int]) -> str:
    return "".join(chr(token_id) for token_id in token_ids)


def logprob_of(token_id: int, position: int) -> float:
    """The log-probability the upstream reports for ``token_id`` at ``position`` of a response.

    It depends on both, so a test notices tokens that were dropped, duplicated or reordered.
    """
    return -((token_id * 31 + position) % 97 + 1) / 100


def render_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text whose :func:`encode` is a chat request's ``prompt_token_ids`` (a toy chat template)."""
    parts = [f"<|{message.get('role', '')}|>{_text(message.get('content'))}" for message in messages]
    for message in messages:
        parts += [render_tool_call(call) for call in message.get("tool_calls") or ()]
    return "\n".join([*parts, "<|assistant|>"])


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the scripted model makes; ``arguments`` may be a mapping or JSON text."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict[str, Any])
    id: str | None = None
    """Minted (``call_<n>``) when not given."""

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True, slots=True)
class Reply:
    """What the scripted model answers. Token ids and logprobs follow from the text unless given."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    token_ids: Sequence[int] | None = None
    """The response's token ids; by default :func:`encode` of the text and each tool call's rendering."""
    logprobs: Sequence[float] | None = None
    """One per token id; by default :func:`logprob_of` each."""
    finish_reason: str | None = None
    """By default ``tool_calls`` when there are any, else ``stop``."""
    prompt_token_ids: Sequence[int] | None = None
    """The prompt's token ids the upstream reports; by default :func:`encode` of :func:`render_prompt`'s text (a
    replay gives the ids a real tokenizer recorded)."""
    model: str | None = None
    """The model name the response carries; by default the upstream's."""
    fail_midway: str | None = None
    """An error that breaks a stream off after its first two chunks, as vLLM reports an engine failure
    midway (a reply that is not streamed fails with it as a 500)."""


class ScriptError(Exception):
    """Raise it from a script to make the upstream answer with an HTTP error (to test failures)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(frozen=True, slots=True)
class ScriptRequest:
    """A parsed request, with the views a script usually needs to pick its reply."""

    endpoint: Endpoint
    body: Mapping[str, Any]

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("messages") or ())

    @property
    def prompt(self) -> str:
        """The completion prompt, or the chat messages rendered as :func:`render_prompt` does."""
        if self.endpoint == "chat":
            return render_prompt(self.messages)
        ids = _token_list(self.body.get("prompt"))
        return decode(ids) if ids is not None else str(self.body.get("prompt", ""))

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids: as sent when a completion prompt is a list of ids, else :func:`encode`."""
        ids = _token_list(self.body.get("prompt"))
        return ids if ids is not None else encode(self.prompt)

    @property
    def system(self) -> str:
        """The system (and developer) messages' text: where frameworks put an agent's instructions."""
        return "\n".join(_text(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer"))

    @property
    def last_user(self) -> str:
        return next((_text(m.get("content")) for m in reversed(self.messages) if m.get("role") == "user"), "")

    @property
    def turn(self) -> int:
        """How many assistant messages the conversation already holds: 0 for the first call."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tool_results(self) -> list[str]:
        """The tool messages after the last assistant message: the answers to its tool calls."""
        results: list[str] = []
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                break
            if message.get("role") == "tool":
                results.insert(0, _text(message.get("content")))
        return results

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools the request offers."""
        return [str(tool.get("function", {}).get("name", "")) for tool in self.body.get("tools") or ()]


Script = Callable[[ScriptRequest], Reply | str]
"""Chooses the reply to a request."""


def echo(request: ScriptRequest) -> Reply | str:
    """Answer with the last user message (the completion prompt for ``/v1/completions``)."""
    return request.last_user if request.endpoint == "chat" else request.prompt


def turns(*replies: Reply | str) -> Script:
    """Answer the n-th call of a conversation with the n-th reply (the last one once they run out).

    The turn is read from the request (its assistant messages), so concurrent conversations each
    get their own sequence.
    """
    if not replies:
        raise ValueError("turns() needs at least one reply")

    def script(request: ScriptRequest) -> Reply | str:
        return replies[min(request.turn, len(replies) - 1)]

    return script


def by_system_prompt(scripts: Mapping[str, Script], default: Script | None = None) -> Script:
    """Route each request to the script whose key occurs in its system prompt: one script per agent."""

    def script(request: ScriptRequest) -> Reply | str:
        system = request.system
        for key, chosen in scripts.items():
            if key in system:
                return chosen(request)
        if default is None:
            raise ScriptError(400, f"no script matches the system prompt {system[:200]!r}; keys: {list(scripts)}")
        return default(request)

    return script


def _text(content: Any) -> str:
    """The text of a message's content, which may be a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast(list[Any], content)
        return "".join(str(cast(dict[str, Any], part).get("text", "")) for part in parts if isinstance(part, dict))
    return str(content)


def _token_list(value: object) -> list[int] | None:
    """A prompt given as token ids (vLLM accepts them), or None for a text prompt."""
    return [int(v) for v in cast(list[Any], value)] if isinstance(value, list) else None


def render_tool_call(call: Mapping[str, Any]) -> str:
    return f"<tool_call>{call['function']['name']} {call['function']['arguments']}</tool_call>"
