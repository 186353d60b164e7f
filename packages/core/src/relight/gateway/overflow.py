"""A prompt or output budget past the model's context, told in the words clients act on.

Coding agents recover from an overflow by themselves (Codex compacts its history on OpenAI's
``context_length_exceeded``; Claude Code shortens on Anthropic's "prompt is too long") only when the
error says so in their API's own words, so the gateway recognises the upstream's refusal (the
relight engine's :class:`~relight.engine.ContextLengthError`, or vLLM's wording) and answers each
API in its own:

- OpenAI (chat, completions, responses): 400, ``code: "context_length_exceeded"``, ``param: "messages"``.
- Anthropic (messages): 400 ``invalid_request_error``, "prompt is too long: N tokens > M maximum".

An output budget (``max_tokens``, ``max_output_tokens``) larger than what the context leaves after
the prompt is not an overflow: every one of these APIs defines it as an upper bound, so the gateway
sends the call again with the budget capped at what is left, and marks the span
(``relight.max_tokens_capped``). A prompt that does not fit at all is refused, and so is, on OpenAI's
chat and completions routes, a budget larger than the model's whole context (400 naming
``max_tokens``, as OpenAI refuses a budget past its model's limit): no prompt could leave room for
it, so it is a mistake, not an upper bound. The Messages and Responses routes cap that too: their
clients (Claude Code, Codex) size it for frontier models whatever model serves them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ContextOverflow", "anthropic_message", "openai_message", "overflow_of"]

_CONTEXT = re.compile(r"maximum context length is (\d+) tokens")
_PROMPT = re.compile(
    r"(?:request has|messages resulted in|your request has) (\d+) input tokens|resulted in (\d+) tokens"
)
_BUDGET = re.compile(r"too large: (\d+)")
# relight_torch's engine and server (relight.engine.ContextLengthError's messages):
_ENGINE_PROMPT = re.compile(r"the prompt has (\d+) tokens; the model's context is (\d+)")
_ENGINE_BUDGET = re.compile(r"\(the context of (\d+) tokens less the prompt's (\d+)\), got (\d+)")


@dataclass(frozen=True, slots=True)
class ContextOverflow:
    """What the upstream said about a request that did not fit its context."""

    context_length: int
    prompt_tokens: int | None
    """The prompt's length, where the upstream told it."""
    max_tokens: int | None = None
    """The output budget asked for, where that (not the prompt) is what did not fit."""

    @property
    def room(self) -> int | None:
        """Tokens the context leaves for the output after the prompt; None where the prompt's length is unknown."""
        return None if self.prompt_tokens is None else self.context_length - self.prompt_tokens

    @property
    def prompt_fits(self) -> bool:
        return self.room is not None and self.room >= 1


def overflow_of(message: str) -> ContextOverflow | None:
    """The overflow a vLLM-style error message describes, or None for any other error.

    vLLM says "This model's maximum context length is C tokens. However, your request has P input
    tokens…" for a prompt, and "'max_tokens' or 'max_completion_tokens' is too large: M. This model's
    maximum context length is C tokens and your request has P input tokens…" for a budget; the
    relight engine's own messages (:class:`~relight.engine.ContextLengthError`) are read too, for
    ``relight_torch.server`` behind an HTTP upstream.
    """
    if own := _ENGINE_PROMPT.search(message):
        return ContextOverflow(int(own.group(2)), int(own.group(1)))
    if own := _ENGINE_BUDGET.search(message):
        return ContextOverflow(int(own.group(1)), int(own.group(2)), int(own.group(3)))
    context = _CONTEXT.search(message)
    if context is None:
        return None
    prompt = _PROMPT.search(message)
    prompt_tokens = None if prompt is None else int(prompt.group(1) or prompt.group(2))
    budget = _BUDGET.search(message)
    return ContextOverflow(int(context.group(1)), prompt_tokens, None if budget is None else int(budget.group(1)))


def openai_message(overflow: ContextOverflow) -> str:
    """OpenAI's wording of an overflow (its clients key on the code, ``context_length_exceeded``)."""
    prompt = (
        ""
        if overflow.prompt_tokens is None
        else f" However, your messages resulted in {overflow.prompt_tokens} tokens."
    )
    return (
        f"This model's maximum context length is {overflow.context_length} tokens.{prompt} "
        "Please reduce the length of the messages."
    )


def anthropic_message(overflow: ContextOverflow) -> str:
    """Anthropic's wording, which Claude Code and the Anthropic SDKs recognise."""
    prompt = "more than the context" if overflow.prompt_tokens is None else f"{overflow.prompt_tokens} tokens"
    return f"prompt is too long: {prompt} > {overflow.context_length} maximum"
