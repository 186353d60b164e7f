"""What a request asks of decoding beyond sampling: forced tool calls, JSON output, token texts.

``tool_choice: "required"`` (or a named function) and ``response_format`` (``json_object``,
``json_schema``) become an xgrammar grammar (the structured-decoding library vLLM and SGLang
use, which runs on the CPU): at each step the tokens the grammar cannot take next are masked
out before sampling, so a forced call is always a ``<tool_call>{"name": …, "arguments": …}</tool_call>``
block whose arguments match the tool's JSON schema, and the turn ends right after it. The
logprobs recorded stay the model's own (see :mod:`relight_torch.engine.torch_engine`): the mask changes what
is sampled, not what training computes.

Options the engine cannot honour are refused with a :class:`relight.engine.EngineRequestError`
naming the field (400), never ignored.

:func:`first_call_forced` is the engine's ``force_first_tool_call`` option: a model whose template
knows no tools (SmolLM2) never calls one when the choice is left to it (``auto``), and some
frameworks (AutoGen, CrewAI) always leave it, so the engine may force the conversation's first call
to be a tool call and let the model answer freely once a tool result is in the messages.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import torch
import xgrammar as xgr
from transformers import PreTrainedTokenizerBase

from relight.engine import EngineRequestError, GenerationRequest, TokenLogprob
from relight_torch.engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["Decoding", "first_call_forced", "parses_tool_calls"]

_MAX_TOP_LOGPROBS = 20
"""OpenAI's limit on ``top_logprobs``."""


def parses_tool_calls(request: GenerationRequest) -> bool:
    """Whether the response's ``<tool_call>`` blocks become tool calls (not with ``tool_choice: "none"``)."""
    return bool(request.tools) and request.tool_choice != "none"


def first_call_forced(request: GenerationRequest) -> GenerationRequest:
    """``request`` with ``tool_choice: "required"`` when it offers tools, leaves the choice to the model
    (``auto`` or unset) and its messages hold no tool result yet; otherwise ``request`` as it is."""
    if not request.tools or request.tool_choice not in (None, "auto") or request.messages is None:
        return request
    if any(message.get("role") == "tool" for message in request.messages):
        return request
    return dataclasses.replace(request, tool_choice="required")


class Decoding:
    """An engine's grammars and token texts: built on first use (~1.5 s for a 49k vocabulary), then shared.

    Args:
        tokenizer: the engine's tokenizer.
        vocab_size: the width of the model's logits (may exceed the tokenizer's length).
        stop_ids: the tokens that end a turn; a grammar, once complete, allows only these.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, stop_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = sorted(stop_ids)

    @cached_property
    def _info(self) -> xgr.TokenizerInfo:
        return xgr.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
        )

    @cached_property
    def _compiler(self) -> xgr.GrammarCompiler:
        return xgr.GrammarCompiler(self._info)

    # -- requests ----------------------------------------------------------------------------------

    def check(self, request: GenerationRequest) -> None:
        """Refuse options that cannot be honoured, naming the field."""
        if not 0 <= request.top_logprobs <= _MAX_TOP_LOGPROBS:
            raise EngineRequestError(
                f"top_logprobs must be between 0 and {_MAX_TOP_LOGPROBS}, got {request.top_logprobs}",
                param="top_logprobs",
            )
        _tool_grammar(request)
        _format_grammar(request.response_format)

    def matcher(self, request: GenerationRequest) -> xgr.GrammarMatcher | None:
        """A matcher for the request's grammar, or None when its decoding is free."""
        forced = _tool_grammar(request)
        grammar = forced or _format_grammar(request.response_format)
        if grammar is None:
            return None
        try:
            compiled = self._compiler.compile_grammar(grammar)
        except Exception as error:  # a schema xgrammar cannot turn into a grammar
            param = "tools" if forced is not None else "response_format"
            raise EngineRequestError(f"{param}: the JSON schema cannot be enforced: {error}", param=param) from error
        return xgr.GrammarMatcher(compiled)

    # -- decoding ----------------------------------------------------------------------------------

    def constrain(self, logits: torch.Tensor, matchers: Sequence[xgr.GrammarMatcher | None]) -> torch.Tensor:
        """``logits`` with each constrained row's disallowed tokens at -inf (a copy; the input is left as it is)."""
        rows = [i for i, matcher in enumerate(matchers) if matcher is not None]
        if not rows:
            return logits
        masked = logits.clone()
        bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        for i in rows:
            matcher = matchers[i]
            assert matcher is not None
            matcher.fill_next_token_bitmask(bitmask, i)
        xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device), indices=rows)
        return masked

    @cached_property
    def _vocab_bytes(self) -> list[bytes]:
        return list(self._info.decoded_vocab)

    def token(self, token_id: int, logprob: float) -> TokenLogprob:
        """A token as OpenAI's logprobs show it: its text (invalid UTF-8 replaced) and its exact bytes."""
        raw = self._vocab_bytes[token_id] if token_id < len(self._vocab_bytes) else b""
        return TokenLogprob(raw.decode("utf-8", errors="replace"), token_id, list(raw), logprob)


def _tool_grammar(request: GenerationRequest) -> xgr.Grammar | None:
    """The grammar of one forced tool call, or None when the model may choose."""
    choice = request.tool_choice
    if choice in (None, "auto", "none"):
        return None
    tools = [_function(tool, i) for i, tool in enumerate(request.tools or ())]
    if not tools:
        raise EngineRequestError(
            f"tool_choice={json.dumps(choice)} needs tools; the request offers none", param="tool_choice"
        )
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function: Any = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        tools = [tool for tool in tools if tool["name"] == name]
        if not tools:
            raise EngineRequestError(
                f"tool_choice names the function {name!r}, which tools do not offer", param="tool_choice"
            )
    elif choice != "required":
        raise EngineRequestError(
            f"tool_choice must be 'auto', 'none', 'required' or {{'type': 'function', 'function': {{'name': …}}}}; "
            f"got {json.dumps(choice)}",
            param="tool_choice",
        )
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": tool["name"]}, "arguments": tool.get("parameters") or {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return xgr.Grammar.concat(
        _literal(TOOL_CALL_OPEN), xgr.Grammar.from_json_schema(schema, any_whitespace=False), _literal(TOOL_CALL_CLOSE)
    )


def _function(tool: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    function = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise EngineRequestError(
            f"tools[{index}] must be {{'type': 'function', 'function': {{'name': …, 'parameters': …}}}}",
            param=f"tools.{index}",
        )
    return function


def _format_grammar(response_format: Mapping[str, Any] | None) -> xgr.Grammar | None:
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":  # an object, as OpenAI's JSON mode gives, not any JSON value
        return xgr.Grammar.from_json_schema({"type": "object"}, any_whitespace=False)
    if kind == "json_schema":
        spec = (response_format or {}).get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise EngineRequestError(
                "response_format of type json_schema needs json_schema.schema, a JSON schema object",
                param="response_format",
            )
        try:
            return xgr.Grammar.from_json_schema(dict(schema), any_whitespace=False)
        except Exception as error:
            raise EngineRequestError(
                f"response_format: the JSON schema cannot be enforced: {error}", param="response_format"
            ) from error
    raise EngineRequestError(
        f"response_format type must be 'text', 'json_object' or 'json_schema', got {kind!r}", param="response_format"
    )


def _literal(text: str) -> xgr.Grammar:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")
