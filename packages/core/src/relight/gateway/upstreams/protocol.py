"""What the gateway sends calls to: an :class:`Upstream`, answering OpenAI requests in the vLLM dialect.

An upstream takes an OpenAI request body and answers with the OpenAI response plus ``prompt_token_ids``
and ``choices[].token_ids`` (and logprobs), whole or as stream chunks, so the gateway never needs to know
which kind of server it talks to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["Endpoint", "Json", "Upstream"]

Endpoint = Literal["chat", "completions"]
"""``/v1/chat/completions`` or ``/v1/completions``."""

Json = dict[str, Any]


@runtime_checkable
class Upstream(Protocol):
    """A model server as the gateway sees it. Raises :class:`UpstreamError` when it fails."""

    name: str
    """Recorded on each LLM span (``relight.upstream``)."""

    async def complete(self, endpoint: Endpoint, body: Json) -> Json:
        """The whole response to ``body``, with token ids and logprobs where the server gives them."""
        ...

    def stream(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Json]:
        """The response as stream chunks (``body`` has ``stream: true``)."""
        ...

    async def models(self) -> list[str]: ...

    async def aclose(self) -> None: ...
