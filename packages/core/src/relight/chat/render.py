"""Messages and tools in the normal form to the token ids a Hugging Face chat template gives them.

A template that does not render tools (SmolLM2's plain ChatML) gets them the hermes way, as
relight-torch's engine parses them (:mod:`relight.chat.normal`): the tools listed in the system
message, and each assistant tool call written as the ``<tool_call>`` block the model wrote, so that
the next turn's prompt holds what was sampled. Without this, such a template renders an assistant
turn that only calls a tool as its end-of-turn token alone, and the tools not at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from relight.chat.normal import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    arguments_as_objects,
    arguments_text,
    normal_tools,
    plain_message,
)

__all__ = ["ChatTokenizer", "assistant_turn", "assistant_turns", "render", "render_text"]


class ChatTokenizer(Protocol):
    """What the renderer needs of a tokenizer: a ``transformers`` tokenizer has it (and a ``chat_template``)."""

    def apply_chat_template(self, conversation: Any, /, *args: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: Any, /, *args: Any, **kwargs: Any) -> Any: ...

    def decode(self, token_ids: Any, /, *args: Any, **kwargs: Any) -> Any: ...


def render(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of ``messages`` (and ``tools``) under the tokenizer's chat template."""
    prepared, listed = _for_template(tokenizer, messages, tools)
    ids = tokenizer.apply_chat_template(
        prepared, tools=listed, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )
    return [int(i) for i in cast(Sequence[Any], ids)]


def render_text(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """The text :func:`render` tokenizes."""
    prepared, listed = _for_template(tokenizer, messages, tools)
    return str(
        tokenizer.apply_chat_template(
            prepared, tools=listed, add_generation_prompt=add_generation_prompt, tokenize=False
        )
    )


def assistant_turn(
    tokenizer: ChatTokenizer,
    history: Sequence[Mapping[str, Any]],
    answer: Mapping[str, Any],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[list[int], list[int]]:
    """``(prompt ids, response ids)`` of one assistant turn: what the model saw, and what it must say.

    The response is the template's own rendering of the turn (the conversation with the answer
    appended, less the prompt), so it ends as the model must end a turn.

    Raises:
        ValueError: the template renders the history differently once the answer follows it, so the
            answer's tokens cannot be told apart from the prompt's.
    """
    prompt = render(tokenizer, history, tools=tools, add_generation_prompt=True)
    full = render(tokenizer, [*history, answer], tools=tools)
    if full[: len(prompt)] != prompt:
        raise ValueError(
            "the chat template renders the conversation before this assistant turn differently once the turn "
            "is added, so its tokens cannot be told apart; use a template whose rendering of a prefix is a "
            "prefix of the whole"
        )
    return prompt, full[len(prompt) :]


def assistant_turns(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """:func:`assistant_turn` for each assistant message: what the model saw and what it should say.

    An assistant message with ``"weight": 0`` (OpenAI's fine-tuning format) is context only: no sample.

    Raises:
        ValueError: for a message (named by index) whose turn :func:`assistant_turn` cannot cut out.
    """
    turns: list[tuple[list[int], list[int]]] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or message.get("weight") == 0:
            continue
        try:
            turns.append(assistant_turn(tokenizer, messages[:index], message, tools=tools))
        except ValueError as error:
            raise ValueError(f"messages[{index}]: {error}") from None
    return turns


def _for_template(
    tokenizer: ChatTokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools to hand the template: plain text, normal tools, and hermes blocks where it has none."""
    plain = [plain_message(m) for m in messages]
    listed = normal_tools(tools) or None
    template = getattr(tokenizer, "chat_template", None)
    template = template if isinstance(template, str) else ""
    if "tool_calls" not in template:
        plain = [_calls_as_text(m) for m in plain]
    if listed and "tools" not in template:
        plain, listed = _tools_in_system_message(plain, listed), None
    return arguments_as_objects(plain), listed


TOOLS_PROMPT = (
    "You may call one or more functions to assist with the user query. The functions are listed in <tools></tools>:"
    "\n<tools>\n{tools}\n</tools>\nTo call a function, write its name and arguments as JSON inside "
    f'{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} tags: {TOOL_CALL_OPEN}{{{{"name": <function-name>, "arguments": '
    f"<args-json-object>}}}}{TOOL_CALL_CLOSE}"
)
"""The system message's account of the tools, for a template that renders none."""


def _tools_in_system_message(
    messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The tools described in the system message (added before the first message if there is none)."""
    listed = TOOLS_PROMPT.format(tools="\n".join(json.dumps(dict(tool)) for tool in tools))
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{listed}"}, *messages[1:]]
    return [{"role": "system", "content": listed}, *messages]


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's tool calls appended to its content as ``<tool_call>`` blocks."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    blocks = "".join(
        f'{TOOL_CALL_OPEN}{{"name": {json.dumps(_function(call).get("name", ""))}, '
        f'"arguments": {arguments_text(_function(call).get("arguments"))}}}{TOOL_CALL_CLOSE}'
        for call in cast(list[Any], calls)
    )
    rest = {key: value for key, value in message.items() if key != "tool_calls"}
    return {**rest, "content": message["content"] + blocks}


def _function(call: Any) -> Mapping[str, Any]:
    function = cast(Mapping[str, Any], call).get("function") if isinstance(call, Mapping) else None
    return cast(Mapping[str, Any], function) if isinstance(function, Mapping) else {}
