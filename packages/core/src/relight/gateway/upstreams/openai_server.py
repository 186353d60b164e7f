"""An OpenAI-compatible server as an upstream: asks a vLLM-style server for token ids and logprobs.

:class:`OpenAIUpstream` finds out which of vLLM's fields the server takes, and cuts a stream into the
bursts of chunks that arrived together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

from relight._internal.http import HttpClient, HttpResponse
from relight.gateway import _json
from relight.gateway.errors import UpstreamError
from relight.gateway.upstreams.protocol import Endpoint, Json

__all__ = ["UPSTREAM_KEEP_ALIVE_SECONDS", "OpenAIUpstream"]

logger = logging.getLogger(__name__)

_PATHS: dict[Endpoint, str] = {"chat": "/chat/completions", "completions": "/completions"}
_JSON = "application/json"


UPSTREAM_KEEP_ALIVE_SECONDS = 2.0
"""How long an idle connection to an upstream is kept for reuse: below the 5 s after which vLLM (uvicorn)
closes it, so a call never goes out on a connection the upstream has just closed (a 502 to the agent)."""


class OpenAIUpstream:
    """An OpenAI-compatible server at ``base_url`` (``http://host:8000/v1``).

    It talks HTTP through :class:`relight._internal.http.HttpClient`, a keep-alive client on httptools,
    because what the client costs is added to every LLM call.

    Args:
        vllm: ask for vLLM's ``return_token_ids``, logprobs and streamed usage. ``None`` (the
            default) finds out what the server takes: the first time it refuses one of these
            fields (a 400 or 422 naming it, as ``transformers serve`` does) the call is sent again
            without it, and it is never sent again; what the server gave (token ids, prompt ids,
            logprobs) is logged once. ``True`` always asks and ``False`` never does (hosted APIs);
            where no ids come back the gateway retokenizes.
        api_key: sent as the bearer token, for hosted APIs.
    """

    def __init__(
        self,
        base_url: str,
        *,
        vllm: bool | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_connections: int = 1024,
    ) -> None:
        self.name = base_url.rstrip("/")
        self.vllm = vllm
        self.timeout = timeout
        self.max_connections = max_connections
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: HttpClient | None = None
        self.refused: set[str] = set()
        """The vLLM fields this server refused (found out when ``vllm`` is None)."""
        self._reported = False

    def _client(self) -> HttpClient:
        """The connection pool, made on first use so that it belongs to the loop that serves calls.

        No upstream's cookies go to agents: the client keeps none."""
        if self._http is None:
            self._http = HttpClient(
                self.name,
                headers=self._headers,
                timeout=self.timeout,
                keep_alive=UPSTREAM_KEEP_ALIVE_SECONDS,
                max_connections=self.max_connections,
            )
        return self._http

    def _prepare(self, endpoint: Endpoint, body: Json) -> Json:
        if self.vllm is False:
            return body
        prepared = dict(body)
        refused = self.refused
        if "return_token_ids" not in refused:
            prepared["return_token_ids"] = True
        if "logprobs" not in refused:
            if endpoint == "chat":
                prepared["logprobs"] = True
            elif body.get("logprobs") is None:
                prepared["logprobs"] = 0
        if body.get("stream") and "stream_options" not in refused:
            prepared["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return prepared

    def _adapted(self, status: int, content: bytes, body: Json, sent: Json) -> bool:
        """Whether the server refused a field the gateway added (now never sent again), so the call can go again."""
        if self.vllm is not None or status not in (400, 422):
            return False
        message = content.decode(errors="replace")
        added = [
            name for name in ("return_token_ids", "logprobs", "stream_options") if sent.get(name) != body.get(name)
        ]
        refused = [name for name in added if name in message]
        if not refused:
            return False
        self.refused.update(refused)
        logger.warning(
            "relight: upstream %s refuses %s (%d: %s); calls go on without it, and spans without the ids it "
            "would give are retokenized",
            self.name,
            ", ".join(refused),
            status,
            _error_message(content)[:300],
        )
        return True

    def _report(self, found: dict[str, bool]) -> None:
        """Log once what the server gives, so that a user sees why spans are exact or retokenized."""
        self._reported = True
        logger.info(
            "relight: upstream %s gives %s",
            self.name,
            ", ".join(f"{name}: {'yes' if given else 'no'}" for name, given in found.items()),
        )

    def _wants_report(self) -> bool:
        return not self._reported and self.vllm is not False

    async def complete(self, endpoint: Endpoint, body: Json) -> Json:
        path = _PATHS[endpoint]
        while True:
            sent = self._prepare(endpoint, body)
            try:
                response = await self._client().request("POST", path, _json.dumps(sent), content_type=_JSON)
                content = await response.read()
            except OSError as error:  # refused, lost, malformed, or past the timeout (a TimeoutError)
                raise UpstreamError(f"{self.name} did not answer: {_describe(error)}") from error
            if response.status < 400:
                break
            if not self._adapted(response.status, content, body, sent):
                raise UpstreamError(_error_message(content), status_code=response.status)
        answer = cast(Json, _json.loads(content))
        if self._wants_report():
            self._report(_found_in(answer))
        return answer

    async def stream(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Json]:
        async for burst in self.bursts(endpoint, body):
            for chunk in burst:
                yield chunk

    async def bursts(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Iterator[Json]]:
        """The stream's chunks: those that arrived in one read together as one iterator, which parses
        each as it is reached. Read each to its end before asking for the next.

        A fast server sends a whole reply in one read: the gateway then handles it, and writes it to
        its client, once instead of once for every chunk. Parsed one at a time, the chunks of a read
        are never all in memory together: a reply's worth of parsed chunks alive at once makes the
        garbage collector run, and move them to its older generations, far more often. A chunk that
        breaks the stream (an error event, malformed JSON) raises where it is reached.
        """
        try:
            response = await self._open_stream(_PATHS[endpoint], endpoint, body)
            async with response:
                found = _found_in({}) if self._wants_report() else None
                done = False
                pending = b""  # a line not yet ended (a first vLLM chunk carries the whole prompt's ids)

                def chunks(lines: list[bytes]) -> Iterator[Json]:
                    nonlocal done
                    for line in lines:
                        if done or not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":  # the body ends just after: read to its end, so the connection is reused
                            done = True
                            continue
                        chunk = self._chunk(data)
                        if found is not None:
                            _found_in(chunk, found)
                        yield chunk

                while (received := await response.next_body()) is not None:  # all that arrived together
                    *lines, pending = (pending + received).split(b"\n")
                    yield chunks(lines)
                if pending:  # a last line without its newline
                    yield chunks([pending])
                if found is not None and self._wants_report():
                    self._report(found)
        except OSError as error:
            raise UpstreamError(f"{self.name} did not answer: {_describe(error)}") from error

    def _chunk(self, data: bytes) -> Json:
        chunk: Json = _json.loads(data)
        if "error" in chunk:
            raise UpstreamError(f"the stream broke off: {_error_message(data)}")
        return chunk

    async def _open_stream(self, path: str, endpoint: Endpoint, body: Json) -> HttpResponse:
        """The streaming response, once the server accepts the request (adapting as :meth:`complete` does)."""
        while True:
            sent = self._prepare(endpoint, body)
            response = await self._client().request("POST", path, _json.dumps(sent), content_type=_JSON)
            if response.status < 400:
                return response
            content = await response.read()
            if not self._adapted(response.status, content, body, sent):
                raise UpstreamError(_error_message(content), status_code=response.status)

    async def models(self) -> list[str]:
        try:
            response = await self._client().request("GET", "/models")
            content = await response.read()
        except OSError as error:
            raise UpstreamError(f"{self.name} did not list its models: {_describe(error)}") from error
        if response.status >= 400:
            raise UpstreamError(_error_message(content), status_code=response.status)
        return [str(model["id"]) for model in json.loads(content).get("data", [])]

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _error_message(content: bytes) -> str:
    """The message of an OpenAI error body, or the body itself."""
    try:
        error: Any = json.loads(content)["error"]
        return str(cast(Json, error)["message"]) if isinstance(error, dict) else str(error)
    except (ValueError, KeyError, TypeError):
        return content.decode(errors="replace")[:2000] or "no reason given"


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _found_in(answer: Json, found: dict[str, bool] | None = None) -> dict[str, bool]:
    """Which of the vLLM fields ``answer`` (a response, or one chunk of a stream) holds, added to ``found``.

    A stream spreads them over its chunks (vLLM sends the prompt's ids in the first, the sampled ids
    and logprobs in later ones), so a stream is judged on all of its chunks, not its first."""
    found = found if found is not None else {"token ids": False, "prompt ids": False, "logprobs": False}
    choices: list[Json] = answer.get("choices") or []
    found["prompt ids"] |= answer.get("prompt_token_ids") is not None
    for choice in choices:
        found["token ids"] |= bool(choice.get("token_ids"))
        found["prompt ids"] |= choice.get("prompt_token_ids") is not None
        found["logprobs"] |= bool(choice.get("logprobs"))
    return found
