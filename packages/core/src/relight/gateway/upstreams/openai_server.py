"""Where the gateway sends calls: OpenAI-compatible servers and in-process engines, behind one protocol.

An :class:`Upstream` takes an OpenAI request body and answers in the vLLM dialect: the OpenAI
response plus ``prompt_token_ids`` and ``choices[].token_ids`` (and logprobs), whole or as stream
chunks. :class:`OpenAIUpstream` asks a vLLM-style server for those fields; :class:`EngineUpstream`
builds them from a :class:`relight.engine.Engine`'s generation. The gateway never needs to know
which one it talks to. :class:`UpstreamPool` keeps each rollout on one replica.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Protocol, cast, runtime_checkable

from relight._internal.http import HttpClient, HttpResponse
from relight.algorithm import UpstreamTarget
from relight.engine import (
    ContextLengthError,
    Engine,
    EngineRequestError,
    Generation,
    GenerationRequest,
    SamplingParams,
    TokenLogprob,
)
from relight.gateway import _json
from relight.gateway.errors import UpstreamError
from relight.gateway.overflow import ContextOverflow

__all__ = ["Endpoint", "EngineUpstream", "OpenAIUpstream", "Upstream", "UpstreamPool", "as_upstream", "bursts_of"]

Endpoint = Literal["chat", "completions"]
"""``/v1/chat/completions`` or ``/v1/completions``."""

Json = dict[str, Any]

logger = logging.getLogger(__name__)

_PATHS: dict[Endpoint, str] = {"chat": "/chat/completions", "completions": "/completions"}
_JSON = "application/json"


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


class EngineUpstream:
    """An in-process :class:`relight.engine.Engine`, answering as a vLLM server would."""

    def __init__(self, engine: Engine, *, name: str = "engine") -> None:
        self.engine = engine
        self.name = name

    async def complete(self, endpoint: Endpoint, body: Json) -> Json:
        request = _generation_request(endpoint, body)
        try:
            generation = await self.engine.generate(request)
        except ContextLengthError as error:
            overflow = ContextOverflow(error.context_length, error.prompt_tokens, error.max_tokens)
            raise UpstreamError(error.message, status_code=400, param=error.param, overflow=overflow) from error
        except EngineRequestError as error:
            raise UpstreamError(error.message, status_code=error.status_code, param=error.param) from error
        except ValueError as error:  # the engine's contract for a request it cannot serve: the client's to fix
            raise UpstreamError(f"engine {self.name!r} refused the request: {error}", status_code=400) from error
        except Exception as error:
            raise UpstreamError(f"engine {self.name!r} failed: {error!r}") from error
        return _engine_response(endpoint, generation)

    async def stream(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Json]:
        for chunk in _as_chunks(endpoint, await self.complete(endpoint, body)):
            yield chunk

    async def models(self) -> list[str]:
        return self.engine.models()

    async def aclose(self) -> None:
        return None


def bursts_of(upstream: Upstream, endpoint: Endpoint, body: Json) -> AsyncIterator[Iterable[Json]]:
    """``upstream``'s stream, the chunks that arrived together as one iterable (:meth:`OpenAIUpstream.bursts`),
    or one by one from any other upstream. Read each to its end before asking for the next."""
    if isinstance(upstream, OpenAIUpstream):
        return upstream.bursts(endpoint, body)
    return _one_by_one(upstream.stream(endpoint, body))


async def _one_by_one(chunks: AsyncIterator[Json]) -> AsyncIterator[Iterable[Json]]:
    async for chunk in chunks:
        yield (chunk,)


def as_upstream(target: UpstreamTarget | Upstream) -> Upstream:
    """An upstream for an engine, a base URL, or an upstream as is."""
    if isinstance(target, str):
        return OpenAIUpstream(target)
    if isinstance(target, Engine):
        return EngineUpstream(target)
    return target


class UpstreamPool:
    """Replicas of one policy. A rollout stays on the replica it first got (its prefix cache is there);
    a new rollout goes to the replica with the fewest calls in flight, then the fewest rollouts."""

    def __init__(self, upstreams: Sequence[Upstream], *, max_remembered: int = 65536) -> None:
        if not upstreams:
            raise ValueError("upstreams must name at least one model server or engine")
        self.upstreams = list(upstreams)
        self._in_flight = [0] * len(self.upstreams)
        self._rollouts = [0] * len(self.upstreams)
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._max_remembered = max_remembered

    def replica_of(self, rollout_id: str) -> int:
        index = self._sticky.get(rollout_id)
        if index is not None:
            self._sticky.move_to_end(rollout_id)
            return index
        index = min(range(len(self.upstreams)), key=lambda i: (self._in_flight[i], self._rollouts[i]))
        self._sticky[rollout_id] = index
        self._rollouts[index] += 1
        if len(self._sticky) > self._max_remembered:
            _, forgotten = self._sticky.popitem(last=False)
            self._rollouts[forgotten] -= 1
        return index

    @contextmanager
    def use(self, rollout_id: str) -> Generator[Upstream]:
        """The rollout's replica, counted as busy for the duration."""
        index = self.replica_of(rollout_id)
        self._in_flight[index] += 1
        try:
            yield self.upstreams[index]
        finally:
            self._in_flight[index] -= 1

    async def aclose(self) -> None:
        for upstream in self.upstreams:
            await upstream.aclose()


# -- engine requests and vLLM-dialect responses ---------------------------------------------------


def _generation_request(endpoint: Endpoint, body: Json) -> GenerationRequest:
    stop = body.get("stop")
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        stop=(stop,) if isinstance(stop, str) else tuple(cast(list[str], stop or ())),
        seed=body.get("seed"),
    )
    model = str(body.get("model", ""))
    if endpoint == "chat":
        return GenerationRequest(
            model=model,
            messages=body["messages"],
            tools=body.get("tools"),
            sampling=sampling,
            tool_choice=body.get("tool_choice"),
            response_format=body.get("response_format"),
            top_logprobs=int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0,
        )
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise UpstreamError("an in-process engine takes a text prompt, not token ids", status_code=400, param="prompt")
    logprobs = body.get("logprobs")
    top = logprobs if isinstance(logprobs, int) and not isinstance(logprobs, bool) else 0
    return GenerationRequest(model=model, prompt=prompt, sampling=sampling, top_logprobs=top)


def _engine_response(endpoint: Endpoint, generation: Generation) -> Json:
    ids, logprobs = generation.response_token_ids, generation.response_logprobs
    usage = {
        "prompt_tokens": len(generation.prompt_token_ids),
        "completion_tokens": len(ids),
        "total_tokens": len(generation.prompt_token_ids) + len(ids),
    }
    response: Json = {"created": int(time.time()), "model": generation.model, "usage": usage}
    if generation.policy_version is not None:
        response["policy_version"] = generation.policy_version
    if generation.policy_version_segments:
        response["policy_version_segments"] = [list(segment) for segment in generation.policy_version_segments]
    if endpoint == "chat":
        message: Json = {"role": "assistant", "content": generation.text or None}
        if generation.tool_calls:
            message["tool_calls"] = generation.tool_calls
        content = [
            {**_chat_token(token), "top_logprobs": [_chat_token(top) for top in tops]}
            for token, tops in zip(_tokens(generation), _tops(generation), strict=True)
        ]
        choice: Json = {"index": 0, "message": message, "logprobs": {"content": content}, "token_ids": ids}
        response |= {
            "id": "chatcmpl-engine",
            "object": "chat.completion",
            "prompt_token_ids": generation.prompt_token_ids,
        }
    else:
        tokens = [token.token for token in _tokens(generation)]
        top = [{t.token: t.logprob for t in tops} for tops in _tops(generation)] if generation.top_logprobs else None
        completion_logprobs = {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": top, "text_offset": []}
        choice = {
            "index": 0,
            "text": generation.text,
            "logprobs": completion_logprobs,
            "token_ids": ids,
            "prompt_token_ids": generation.prompt_token_ids,
        }
        response |= {"id": "cmpl-engine", "object": "text_completion"}
    choice["finish_reason"] = generation.finish_reason
    response["choices"] = [choice]
    return response


def _tokens(generation: Generation) -> list[TokenLogprob]:
    """The sampled tokens as the engine describes them, or as ``token_id:N`` where it cannot."""
    if generation.tokens is not None:
        return generation.tokens
    pairs = zip(generation.response_token_ids, generation.response_logprobs, strict=True)
    return [TokenLogprob(f"token_id:{t}", t, [], lp) for t, lp in pairs]


def _tops(generation: Generation) -> list[list[TokenLogprob]]:
    return generation.top_logprobs or [[] for _ in generation.response_token_ids]


def _chat_token(token: TokenLogprob) -> Json:
    return {"token": token.token, "logprob": token.logprob, "bytes": token.bytes or None}


def _as_chunks(endpoint: Endpoint, response: Json) -> list[Json]:
    """A whole response cut into the stream chunks a vLLM server would have sent."""
    (choice,) = response["choices"]
    head = {key: response[key] for key in ("id", "created", "model") if key in response}
    extra = {key: response[key] for key in ("policy_version", "policy_version_segments") if key in response}
    if endpoint == "completions":
        return [
            {**head, **extra, "object": "text_completion", "choices": [choice]},
            {**head, "object": "text_completion", "choices": [], "usage": response["usage"]},
        ]
    head["object"] = "chat.completion.chunk"
    message = choice["message"]
    first: Json = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    body: Json = {
        "index": 0,
        "delta": {"content": message.get("content") or ""},
        "logprobs": choice["logprobs"],
        "finish_reason": None,
        "token_ids": choice["token_ids"],
    }
    chunks = [
        {**head, **extra, "choices": [first], "prompt_token_ids": response["prompt_token_ids"]},
        {**head, "choices": [body]},
    ]
    for index, call in enumerate(message.get("tool_calls") or ()):
        delta: Json = {"tool_calls": [{"index": index, **call}]}
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
    last: Json = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    chunks.append({**head, "choices": [last]})
    chunks.append({**head, "choices": [], "usage": response["usage"]})
    return chunks


def _number(body: Json, key: str, default: float) -> float:
    value = body.get(key)
    return default if value is None else float(value)


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
