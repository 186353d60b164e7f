"""Answers shaped as the client should see them: the gateway's response id, and only the fields it asked for.

The upstream answers in the vLLM dialect (token ids, logprobs, policy versions) whatever the client asked,
because the span needs them; the client gets the OpenAI answer it asked for, under the response id its
framework will quote back (the id adapters join their role spans by).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from relight.gateway.calls.record import Exchange
from relight.gateway.errors import UpstreamError

__all__ = ["ForClient", "shaped_chunks"]

Json = dict[str, Any]

_INJECTED_IDS = ("prompt_token_ids", "token_ids")


def shaped_chunks(
    exchange: Exchange, for_client: ForClient, chunks: Iterable[Json], broken: list[Exception]
) -> Iterator[Json]:
    """``chunks`` added to the exchange and shaped for the client, one at a time; one that is malformed
    (or an upstream error on the way) ends them and is put in ``broken``."""
    try:
        for chunk in chunks:
            exchange.add(chunk)
            if (shaped := for_client(chunk)) is not None:
                yield shaped
    except (UpstreamError, LookupError, TypeError, ValueError) as error:
        broken.append(error)


class ForClient:
    """Shapes answers as the client should see them: the minted id, without fields it did not ask for.

    What to keep is decided once per call from its request, not again for each of a stream's chunks.
    """

    def __init__(
        self, request: Json, response_id: str, *, keep_prompt_ids: bool = False, model: str | None = None
    ) -> None:
        stream_options: Json = request.get("stream_options") or {}
        self.response_id = response_id
        self.model = model
        """The model name the client asked for, where the upstream served it as another (a policy's)."""
        self.keep_prompt_ids = keep_prompt_ids
        self.wants_usage = not request.get("stream") or bool(stream_options.get("include_usage"))
        self.hidden = ("policy_version", "policy_version_segments", *(() if self.wants_usage else ("usage",)))
        self.keep_ids = bool(request.get("return_token_ids"))
        self.keep_logprobs = request.get("logprobs") not in (None, False)

    def __call__(self, answer: Json) -> Json | None:
        """The shaped answer, or None for a chunk the client should not get (streamed usage it did not ask for)."""
        choices: list[Json] = answer.get("choices") or []
        if not choices and not self.wants_usage:
            return None
        shaped = dict(answer)  # a copy, then the few keys to drop: half the time of a filtering comprehension
        for key in self.hidden:
            shaped.pop(key, None)
        shaped["id"] = self.response_id
        if self.model is not None:
            shaped["model"] = self.model
        if not (self.keep_ids or self.keep_prompt_ids):
            shaped.pop("prompt_token_ids", None)
        if not (self.keep_ids and self.keep_logprobs):
            shaped["choices"] = [self._strip(choice) for choice in choices]
        return shaped

    def _strip(self, choice: Json) -> Json:
        stripped = dict(choice)
        if not self.keep_ids:
            for key in _INJECTED_IDS:
                stripped.pop(key, None)
        if not self.keep_logprobs and "logprobs" in stripped:
            stripped["logprobs"] = None
        return stripped
