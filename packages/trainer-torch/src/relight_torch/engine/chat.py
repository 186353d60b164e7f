"""Messages in OpenAI's shape to the token ids a Hugging Face chat template gives them.

The engine (to build prompts) and SFT (to find each assistant turn's tokens) render through this
one function, so a demonstration is tokenized exactly as the engine would prompt and sample it.

Messages are made what templates expect: ``content: null`` (an assistant turn that only calls
tools, as every framework sends it) becomes ``""``, list-of-parts content becomes its text, and
tool-call arguments become objects. A template that does not render tools (SmolLM2's plain ChatML)
gets them the hermes way the engine parses (:mod:`relight_torch.engine.tool_calls`): the tools listed in
the system message, and each assistant tool call written as the ``<tool_call>`` block the model
wrote, so that the next turn's prompt holds what was sampled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from relight_torch.engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, arguments_as_objects

__all__ = ["assistant_turns", "render"]


def render(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of ``messages`` (and ``tools``) under the tokenizer's chat template."""
    plain = [_plain_message(m) for m in messages]
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    if "tool_calls" not in template:
        plain = [_calls_as_text(m) for m in plain]
    if tools and "tools" not in template:
        plain, tools = _tools_in_system_message(plain, tools), None
    ids = tokenizer.apply_chat_template(
        arguments_as_objects(plain),
        tools=[dict(t) for t in tools] if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)  # type: ignore[arg-type]


def assistant_turns(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, response ids)`` for each assistant message: what the model saw and what it should say.

    An assistant message with ``"weight": 0`` (OpenAI's fine-tuning format) is context only: no sample.

    Raises:
        ValueError: the template renders a conversation's start differently once it goes on, so
            an assistant turn's tokens cannot be told apart from the prompt's.
    """
    turns: list[tuple[list[int], list[int]]] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or message.get("weight") == 0:
            continue
        prompt = render(tokenizer, messages[:index], tools=tools, add_generation_prompt=True)
        full = render(tokenizer, messages[: index + 1], tools=tools)
        if full[: len(prompt)] != prompt:
            raise ValueError(
                f"messages[{index}]: the chat template renders the conversation before this assistant turn "
                "differently once the turn is added, so its tokens cannot be masked; use a template whose "
                "rendering of a prefix is a prefix of the whole"
            )
        turns.append((prompt, full[len(prompt) :]))
    return turns


def _plain_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI message with text content, as chat templates expect (null is empty, parts are joined)."""
    content = message.get("content")
    if content is None:
        return {**message, "content": ""}
    if isinstance(content, list):
        text = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return {**message, "content": text}
    return dict(message)


_TOOLS_PROMPT = (
    "You may call one or more functions to assist with the user query. The functions are listed in <tools></tools>:"
    "\n<tools>\n{tools}\n</tools>\nTo call a function, write its name and arguments as JSON inside "
    f'{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} tags: {TOOL_CALL_OPEN}{{{{"name": <function-name>, "arguments": '
    f"<args-json-object>}}}}{TOOL_CALL_CLOSE}"
)


def _tools_in_system_message(
    messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The tools described in the system message (added before the first message if there is none)."""
    listed = _TOOLS_PROMPT.format(tools="\n".join(json.dumps(dict(tool)) for tool in tools))
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{listed}"}, *messages[1:]]
    return [{"role": "system", "content": listed}, *messages]


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's tool calls appended to its content as ``<tool_call>`` blocks."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    blocks = "".join(
        f'{TOOL_CALL_OPEN}{{"name": {json.dumps(call["function"]["name"])}, '
        f'"arguments": {_arguments_text(call["function"].get("arguments"))}}}{TOOL_CALL_CLOSE}'
        for call in calls
    )
    rest = {key: value for key, value in message.items() if key != "tool_calls"}
    return {**rest, "content": message["content"] + blocks}


def _arguments_text(arguments: Any) -> str:
    """Arguments as the model would have written them: a JSON object (OpenAI sends them as a JSON string)."""
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments))
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments if arguments is not None else {})
