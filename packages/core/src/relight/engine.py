"""The in-process engine protocol: a model the gateway can call directly, without HTTP.

Trainers that hold the policy in the same process (``relight-torch``) implement :class:`Engine`;
the gateway wraps it as an upstream beside OpenAI-compatible URLs. The engine does the
templating, sampling and (optionally) tool-call parsing, and returns the exact token ids and
logprobs it sampled, which is what makes transitions exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from pydantic import JsonValue

__all__ = [
    "ContextLengthError",
    "Engine",
    "EngineRequestError",
    "Generation",
    "GenerationRequest",
    "SamplingParams",
    "TokenLogprob",
]


class EngineRequestError(ValueError):
    """A request the engine cannot serve as asked: a bad field, an option it lacks, a model it does not serve.

    The gateway answers it with ``status_code`` (400; 404 for an unknown model, as vLLM does) in
    OpenAI's error shape, naming ``param``: the client's mistake, which retrying would repeat.
    Any other exception from an engine is the engine's failure (502).
    """

    def __init__(self, message: str, *, param: str | None = None, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_code = status_code


class ContextLengthError(EngineRequestError):
    """The prompt, or the prompt and ``max_tokens`` together, do not fit the model's context.

    The numbers let the gateway answer in each API's own words (OpenAI's ``context_length_exceeded``,
    Anthropic's "prompt is too long") and cap an output budget at what the context leaves.
    """

    def __init__(self, message: str, *, context_length: int, prompt_tokens: int, max_tokens: int | None = None) -> None:
        super().__init__(message, param="max_tokens" if max_tokens is not None else "messages")
        self.context_length = context_length
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample; the OpenAI request's fields of the same names."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    """None lets the engine choose (its context limit less the prompt)."""
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat (``messages``) or completion (``prompt``) request; exactly one of the two is set."""

    model: str
    messages: Sequence[Mapping[str, JsonValue]] | None = None
    prompt: str | None = None
    tools: Sequence[Mapping[str, JsonValue]] | None = None
    """OpenAI-style tool definitions, for chat templates that render them."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tool_choice: JsonValue = None
    """OpenAI's ``tool_choice``: ``"auto"`` (or None), ``"none"``, ``"required"`` or a named function."""
    response_format: Mapping[str, JsonValue] | None = None
    """OpenAI's ``response_format`` (``text``, ``json_object``, ``json_schema``)."""
    top_logprobs: int = 0
    """How many most likely tokens to report at each position (chat ``top_logprobs``, completions ``logprobs``)."""


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token as OpenAI's logprobs show it: its text, its UTF-8 bytes, its log-probability."""

    token: str
    token_id: int
    bytes: list[int]
    logprob: float


@dataclass(frozen=True, slots=True)
class Generation:
    """What the engine produced, token for token."""

    text: str
    """The response's text, without any tool-call markup the engine parsed out."""
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    """Log-probability of each sampled token under the sampling distribution's model (temperature 1)."""
    finish_reason: Literal["stop", "length", "tool_calls"]
    model: str
    policy_version: int | None = None
    """The version of the weights that sampled it: the oldest, when an update landed mid-call."""
    policy_version_segments: list[tuple[int, int]] | None = None
    """``[(first_token, version), …]`` when more than one version sampled the response; None otherwise."""
    tool_calls: list[dict[str, JsonValue]] | None = None
    """OpenAI-style ``tool_calls`` entries (``{"id", "type": "function", "function": {"name", "arguments"}}``)."""
    tokens: list[TokenLogprob] | None = None
    """The sampled tokens with their text and bytes, where the engine can tell them (else ids stand in)."""
    top_logprobs: list[list[TokenLogprob]] | None = None
    """For each response token, the request's ``top_logprobs`` most likely tokens at that position."""


@runtime_checkable
class Engine(Protocol):
    """A model served in-process. Must be safe to call from many concurrent rollouts."""

    async def generate(self, request: GenerationRequest) -> Generation:
        """Sample one response. Raises ValueError naming the field for a request it cannot serve
        (``max_tokens`` past the context, a bad temperature): the gateway answers it with a 400."""
        ...

    def models(self) -> list[str]:
        """The model names this engine answers to (for ``/v1/models``)."""
        ...
