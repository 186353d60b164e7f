"""The optimiser: the model that reads the agent's rollouts and writes better instructions, at any OpenAI endpoint.

``Optimizer(base_url=..., model=...)`` names it (a hosted API, a local vLLM, the agent's own model);
the search calls it once per round, more when a reply cannot be used (see :mod:`relight_apo.proposal`).
It is called directly, never through relight's gateway: its calls are not the agent's, so they are
neither recorded as the agent's spans nor counted in the rollout budget. Their tokens are counted
(``optimizer_input_tokens``, ``optimizer_output_tokens``) and, given the endpoint's prices, their cost.

An endpoint that cannot be reached, times out, or answers 429 or 5xx is tried again ``retries`` times,
waiting longer each time; one that still fails, or that refuses the request (another 4xx: a wrong
key, an unknown model), raises :class:`OptimizerError` saying what it answered.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from relight.errors import ConfigError, RelightError

__all__ = ["Optimizer", "OptimizerError", "Usage"]


class OptimizerError(RelightError):
    """The optimiser's endpoint could not be used (unreachable, timing out, refusing): the search stops here."""


@dataclass(slots=True)
class Usage:
    """What the optimiser's calls cost so far: calls, tokens, seconds, and dollars when its prices are known."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "seconds": round(self.seconds, 3),
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def of(cls, saved: Mapping[str, Any]) -> Usage:
        return cls(
            calls=int(saved.get("calls", 0)),
            input_tokens=int(saved.get("input_tokens", 0)),
            output_tokens=int(saved.get("output_tokens", 0)),
            seconds=float(saved.get("seconds", 0.0)),
            cost_usd=float(saved.get("cost_usd", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class Optimizer:
    """The optimiser model and how to call it.

    Args:
        base_url: the endpoint's OpenAI base URL (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``).
        model: the model's name there.
        api_key: sent as a bearer token; ``RELIGHT_APO_API_KEY``, then ``OPENAI_API_KEY`` by default.
        temperature: its sampling temperature: above 0, so a retried round can propose something else.
        max_tokens: the longest reply asked for (the critique and the whole new prompt).
        timeout: seconds one call may take.
        retries: calls made again after one that failed to arrive (unreachable, timed out, 429, 5xx).
        retry_seconds: the wait before the first such retry, doubled for each next one.
        input_price: US dollars per million input tokens, to report ``optimizer_cost_usd``.
        output_price: US dollars per million output tokens.
        extra_body: more fields for every request body.
    """

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 1.0
    max_tokens: int = 2048
    timeout: float = 300.0
    retries: int = 3
    retry_seconds: float = 1.0
    input_price: float | None = None
    output_price: float | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict[str, Any])

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"Optimizer base_url must be an http(s) URL, got {self.base_url!r}")
        if not self.model:
            raise ConfigError("Optimizer model must name the optimiser's model at its endpoint")
        if self.retries < 0 or not self.timeout > 0:
            raise ConfigError(f"Optimizer needs retries >= 0 and timeout > 0, got {self.retries} and {self.timeout}")

    @property
    def prices_known(self) -> bool:
        return self.input_price is not None and self.output_price is not None

    async def complete(self, messages: Sequence[Mapping[str, str]], usage: Usage) -> str:
        """The text of one chat completion, counted in ``usage``; OptimizerError when the endpoint cannot give one."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
        }
        key = self.api_key or os.environ.get("RELIGHT_APO_API_KEY") or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = f"{self.base_url.rstrip('/')}/chat/completions"
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.retry_seconds * 2 ** (attempt - 1))
            began = time.perf_counter()
            try:
                async with httpx.AsyncClient(timeout=self.timeout) as client:
                    response = await client.post(url, json=body, headers=headers)
            except httpx.HTTPError as error:
                failure = f"{type(error).__name__}: {error}".rstrip(": ")
                continue
            finally:
                usage.seconds += time.perf_counter() - began
            if response.status_code == 429 or response.status_code >= 500:
                failure = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                raise OptimizerError(
                    f"the optimiser at {self.base_url} (model {self.model!r}) refused the request: "
                    f"HTTP {response.status_code}: {response.text[:500]}"
                )
            return self._text(response, usage)
        raise OptimizerError(
            f"the optimiser at {self.base_url} (model {self.model!r}) could not be reached after "
            f"{self.retries + 1} call(s): {failure}"
        )

    def _text(self, response: httpx.Response, usage: Usage) -> str:
        try:
            payload: Any = response.json()
            message = payload["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise OptimizerError(
                f"the optimiser at {self.base_url} answered with no choices[0].message: {response.text[:300]}"
            ) from None
        usage.calls += 1
        counted = cast(dict[str, Any], payload.get("usage") or {})
        input_tokens, output_tokens = int(counted.get("prompt_tokens") or 0), int(counted.get("completion_tokens") or 0)
        usage.input_tokens += input_tokens
        usage.output_tokens += output_tokens
        if self.input_price is not None and self.output_price is not None:
            usage.cost_usd += (input_tokens * self.input_price + output_tokens * self.output_price) / 1e6
        return str(cast(dict[str, Any], message).get("content") or "")
