"""Token ids for calls whose upstream gave none (a hosted API, an old vLLM): tokenize the text ourselves.

Retokenized ids may differ from what the model actually sampled (a tokenizer can split the same
text in more than one way), so the gateway marks such spans ``relight.retokenized`` and counts
them; trainers may choose to skip them. Logprobs cannot be recovered and are left out. A response
with tool calls is retokenized from their JSON, not the markup the model wrote them in: such a call
is marked inexact (``relight.retokenized.exact`` false, ``tool_calls_not_rendered``), and training
leaves it out unless told to keep inexact calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["HuggingFaceRetokenizer", "Retokenizer", "end_of_turn"]


@runtime_checkable
class Retokenizer(Protocol):
    """Turns a call's text back into token ids with the served model's tokenizer.

    One may also have an ``end_of_turn`` token id (see :func:`end_of_turn`), appended to a chat
    response the model ended by itself.
    """

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        """A chat request's prompt as the model saw it: the chat template applied, generation prompt added."""
        ...

    def text_ids(self, text: str) -> list[int]:
        """Plain text (a completion prompt, a response), without special tokens."""
        ...


class HuggingFaceRetokenizer:
    """A :class:`Retokenizer` over a ``transformers`` tokenizer (any object with its methods).

    Its ``end_of_turn`` is the tokenizer's eos token, which ends an assistant turn in chat templates.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        eos = getattr(tokenizer, "eos_token_id", None)
        self.end_of_turn: int | None = eos if isinstance(eos, int) else None

    @classmethod
    def for_model(cls, name: str) -> HuggingFaceRetokenizer:
        """The tokenizer of a model that transformers can load from local files (a folder, or the HF cache).

        Raises:
            ImportError: transformers is not installed.
            OSError: no local tokenizer goes by that name.
        """
        from transformers import AutoTokenizer  # pyright: ignore[reportMissingImports, reportUnknownVariableType]

        return cls(AutoTokenizer.from_pretrained(name, local_files_only=True))  # pyright: ignore[reportUnknownMemberType]

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        text: str = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        return self.text_ids(text)

    def text_ids(self, text: str) -> list[int]:
        return [int(token_id) for token_id in self.tokenizer.encode(text, add_special_tokens=False)]


def end_of_turn(retokenizer: Retokenizer) -> int | None:
    """The token a retokenizer says ends a turn (its optional ``end_of_turn`` attribute), if any."""
    value = getattr(retokenizer, "end_of_turn", None)
    return value if isinstance(value, int) else None


def response_text(content: str, tool_calls: Sequence[Mapping[str, Any]]) -> str:
    """A response's text with its tool calls appended as JSON: the best stand-in for the model's markup."""
    calls = [json.dumps(call.get("function", {}), separators=(",", ":")) for call in tool_calls]
    return content + "".join(calls)
