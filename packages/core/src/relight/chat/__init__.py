"""Conversations as token ids: one normal form of messages and tools, one renderer, one exactness check.

Every path that turns a conversation into token ids goes through :func:`render`: relight-torch's
engine (the prompt it samples from) and SFT (the turns it imitates), the gateway when an upstream
gave no ids, and traces imported over OTLP (:mod:`relight.otlp`). A call therefore means the same
tokens wherever it came from, and :func:`retokenize` says, reason by reason, whether those tokens
hold everything the call recorded: its text, its tool calls, its tool results and its tools.

The core never imports ``transformers``: the caller passes a tokenizer (:class:`ChatTokenizer`).
"""

from relight.chat.exactness import Inexact, Mismatch, Retokenized, recorded_mismatches, retokenize
from relight.chat.normal import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, arguments_as_objects, normal_tool, normal_tools
from relight.chat.render import ChatTokenizer, assistant_turn, assistant_turns, render, render_text

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ChatTokenizer",
    "Inexact",
    "Mismatch",
    "Retokenized",
    "arguments_as_objects",
    "assistant_turn",
    "assistant_turns",
    "normal_tool",
    "normal_tools",
    "recorded_mismatches",
    "render",
    "render_text",
    "retokenize",
]
