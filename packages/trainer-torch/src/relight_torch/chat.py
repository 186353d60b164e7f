"""Messages in OpenAI's shape to the token ids a Hugging Face chat template gives them.

The engine (to build prompts) and SFT (to find each assistant turn's tokens) render through this
one function, so a demonstration is tokenized exactly as the engine would prompt and sample it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from relight_torch.toolcalls import arguments_as_objects

__all__ = ["assistant_turns", "render"]


def render(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of ``messages`` (and ``tools``) under the tokenizer's chat template."""
    plain = arguments_as_objects([_plain_message(m) for m in messages])
    ids = tokenizer.apply_chat_template(
        plain,
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

    Raises:
        ValueError: the template renders a conversation's start differently once it goes on, so
            an assistant turn's tokens cannot be told apart from the prompt's.
    """
    turns: list[tuple[list[int], list[int]]] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
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
    """An OpenAI message with list-of-parts content joined into text, as chat templates expect."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return {**message, "content": text}
    return dict(message)
