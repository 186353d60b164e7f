"""A real OpenAI-compatible server whose replies come from a script: the upstream for tests and benchmarks.

It speaks the vLLM dialect, so the gateway can be tested exactly as it runs in production: asked
for ``return_token_ids`` it sends ``prompt_token_ids`` and ``choices[].token_ids``; asked for
``logprobs`` (and ``top_logprobs``) it sends them; ``stream: true`` gets server-sent events.
Token ids are known in advance: one id per character (its code point), so a test can compute what
any reply must have been, and :attr:`ScriptedUpstream.served` keeps every reply as sent.

A script is any callable from a :class:`ScriptRequest` to a :class:`Reply` (or a plain string;
both live in :mod:`relight.scripted.scripts`; import them from :mod:`relight.scripted`)::

    script = by_system_prompt({
        "researcher": turns(Reply(tool_calls=[ToolCall("search", {"q": "otters"})]), "Otters hold hands."),
        "writer": turns("Draft: otters hold hands while they sleep."),
    })
    async with ScriptedUpstream(script) as upstream:      # on this loop; ``with`` runs it on a thread
        client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="unused")

Replies are chosen from what is in the request (the agent's system prompt, how many assistant
turns it holds), never from call order, so many rollouts can run at once against one server.
A handoff in a multi-agent framework is just a tool call (``ToolCall("transfer_to_writer")``).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from relight._internal.server import AsgiServer
from relight.scripted.scripts import (
    Endpoint,
    Reply,
    Script,
    ScriptError,
    ScriptRequest,
    echo,
    encode,
    logprob_of,
    render_tool_call,
)

__all__ = ["ScriptedUpstream", "Served", "first_calls_reach"]


@dataclass(frozen=True, slots=True)
class Served:
    """One reply exactly as the upstream sent it."""

    response_id: str
    endpoint: Endpoint
    request: Mapping[str, Any]
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    stream: bool
    model: str | None = None
    """The model name it answered as, where the reply named one."""


@dataclass(frozen=True, slots=True)
class _Piece:
    """A run of response tokens sent together (one streamed chunk)."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    tool_call: dict[str, Any] | None = None


class ScriptedUpstream(AsgiServer):
    """An OpenAI-compatible HTTP server on loopback, replying as ``script`` says.

    Args:
        script: chooses each reply; :func:`echo` by default.
        model: the model name it reports in ``/v1/models`` and responses.
        return_token_ids: honour vLLM's ``return_token_ids``; False makes it behave like a hosted
            API that ignores the field (the gateway must then retokenize).
        chunk_chars: characters per streamed content chunk.
        context_length: refuse, as vLLM does and in its words, a prompt longer than this many tokens or
            a ``max_tokens`` past what it leaves; None for no limit.
        script_on_thread: run the script on a worker thread, so that a script that waits (a model
            that hangs, for timeout tests) holds its own request only, not every other one.
    """

    def __init__(
        self,
        script: Script = echo,
        *,
        model: str = "scripted",
        return_token_ids: bool = True,
        chunk_chars: int = 4,
        context_length: int | None = None,
        script_on_thread: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.script = script
        self.model = model
        self.return_token_ids = return_token_ids
        self.chunk_chars = chunk_chars
        self.context_length = context_length
        self.script_on_thread = script_on_thread
        self.served: list[Served] = []
        """Every reply sent, in order."""
        self.requests: list[Mapping[str, Any]] = []
        """Every request body received, in order (also those that failed)."""
        self._lock = threading.Lock()
        self._ids = itertools.count()
        # Plain Starlette, as the gateway: it stands in for a vLLM server, so it adds nothing a test would time.
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        super().__init__(app, host=host, port=port)

    @classmethod
    def instant(cls, text: str = "ok", **options: Any) -> ScriptedUpstream:
        """An upstream that answers every request at once with ``text``: for benchmarks."""
        reply = Reply(text)
        return cls(lambda _request: reply, **options)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:<port>/v1``)."""
        return f"{self.url}/v1"

    def served_by_id(self) -> dict[str, Served]:
        with self._lock:
            return {served.response_id: served for served in self.served}

    # -- endpoints --------------------------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "relight"}]}
        )

    async def _chat(self, request: Request) -> Response:
        return await self._serve("chat", request)

    async def _completions(self, request: Request) -> Response:
        return await self._serve("completions", request)

    async def _serve(self, endpoint: Endpoint, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            return _error(400, f"request body is not JSON: {error}")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        with self._lock:
            self.requests.append(body)  # pyright: ignore[reportUnknownArgumentType]
        if (body.get("n") or 1) != 1:  # pyright: ignore[reportUnknownMemberType]
            return _error(400, "n must be 1: the scripted upstream makes one choice per request")
        scripted = ScriptRequest(endpoint, body)  # pyright: ignore[reportUnknownArgumentType]
        if (overflow := self._overflow(scripted)) is not None:
            return _error(400, overflow)
        try:
            reply = await asyncio.to_thread(self.script, scripted) if self.script_on_thread else self.script(scripted)
        except ScriptError as error:
            return _error(error.status_code, error.message)
        reply = Reply(reply) if isinstance(reply, str) else reply
        served, pieces = self._sample(scripted, reply)
        if reply.fail_midway is not None and not served.stream:
            return _error(500, reply.fail_midway)
        with self._lock:
            self.served.append(served)
        if served.stream:
            render = self._chat_chunks if endpoint == "chat" else self._completion_chunks
            chunks = render(scripted, served, pieces)
            if reply.fail_midway is not None:
                chunks = [*chunks[:2], _error_body(500, reply.fail_midway)]
            return StreamingResponse(_sse(chunks), media_type="text/event-stream")
        render_body = self._chat_body if endpoint == "chat" else self._completion_body
        return JSONResponse(render_body(scripted, served, pieces))

    def _overflow(self, request: ScriptRequest) -> str | None:
        """vLLM's message for a request past :attr:`context_length`, or None when it fits."""
        if self.context_length is None:
            return None
        context, prompt = self.context_length, len(request.prompt_token_ids)
        budget = request.body.get("max_completion_tokens") or request.body.get("max_tokens")
        if prompt >= context:
            return (
                f"This model's maximum context length is {context} tokens. However, your request has {prompt} "
                "input tokens. Please reduce the length of the input messages."
            )
        if isinstance(budget, int) and budget > context - prompt:
            return (
                f"'max_tokens' or 'max_completion_tokens' is too large: {budget}. This model's maximum context "
                f"length is {context} tokens and your request has {prompt} input tokens "
                f"({budget} > {context} - {prompt})."
            )
        return None

    # -- sampling ---------------------------------------------------------------------------------

    def _sample(self, request: ScriptRequest, reply: Reply) -> tuple[Served, list[_Piece]]:
        number = next(self._ids)
        prefix = "chatcmpl" if request.endpoint == "chat" else "cmpl"
        tool_calls = [
            {
                "id": call.id or f"call_{number}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for index, call in enumerate(reply.tool_calls)
        ]
        if reply.token_ids is None:
            step = max(1, self.chunk_chars)
            runs = [
                (reply.text[i : i + step], encode(reply.text[i : i + step]), None)
                for i in range(0, len(reply.text), step)
            ]
            runs += [("", encode(render_tool_call(call)), call) for call in tool_calls]
        else:
            runs = [(reply.text, list(reply.token_ids), None), *(("", list[int](), call) for call in tool_calls)]
        token_ids = [token_id for _, ids, _ in runs for token_id in ids]
        if reply.logprobs is None:
            logprobs = [logprob_of(token_id, position) for position, token_id in enumerate(token_ids)]
        elif len(reply.logprobs) == len(token_ids):
            logprobs = list(reply.logprobs)
        else:
            raise ValueError(f"Reply.logprobs has {len(reply.logprobs)} entries for {len(token_ids)} token ids")
        pieces: list[_Piece] = []
        position = 0
        for text, ids, call in runs:
            pieces.append(_Piece(text, ids, logprobs[position : position + len(ids)], call))
            position += len(ids)
        served = Served(
            response_id=f"{prefix}-up{number}",
            endpoint=request.endpoint,
            request=request.body,
            prompt_token_ids=request.prompt_token_ids
            if reply.prompt_token_ids is None
            else list(reply.prompt_token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            text=reply.text,
            tool_calls=tool_calls,
            finish_reason=reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
            stream=bool(request.body.get("stream")),
            model=reply.model,
        )
        return served, pieces

    def _wants_ids(self, request: ScriptRequest) -> bool:
        return self.return_token_ids and bool(request.body.get("return_token_ids"))

    def _envelope(self, served: Served, kind: str, choice: dict[str, Any]) -> dict[str, Any]:
        """A response or stream chunk of ``kind`` (its ``object``) around one choice."""
        return {
            "id": served.response_id,
            "object": kind,
            "created": int(time.time()),
            "model": served.model or self.model,
            "choices": [choice],
        }

    def _usage(self, served: Served) -> dict[str, int]:
        prompt, completion = len(served.prompt_token_ids), len(served.token_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # -- /v1/chat/completions ---------------------------------------------------------------------

    def _chat_logprobs(self, request: ScriptRequest, piece: _Piece) -> dict[str, Any] | None:
        if not request.body.get("logprobs"):
            return None
        top = int(request.body.get("top_logprobs") or 0)
        return {"content": [_token_logprob(t, lp, top) for t, lp in zip(piece.token_ids, piece.logprobs, strict=True)]}

    def _chat_body(self, request: ScriptRequest, served: Served, pieces: list[_Piece]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": served.text or None}
        if served.tool_calls:
            message["tool_calls"] = served.tool_calls
        whole = _Piece(served.text, served.token_ids, served.logprobs)
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": self._chat_logprobs(request, whole),
            "finish_reason": served.finish_reason,
        }
        body = self._envelope(served, "chat.completion", choice) | {"usage": self._usage(served)}
        if self._wants_ids(request):
            choice["token_ids"] = served.token_ids
            body["prompt_token_ids"] = served.prompt_token_ids
        return body

    def _chat_chunks(self, request: ScriptRequest, served: Served, pieces: list[_Piece]) -> list[dict[str, Any]]:
        wants_ids = self._wants_ids(request)

        def chunk(delta: dict[str, Any], piece: _Piece | None = None, finish: str | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": self._chat_logprobs(request, piece) if piece is not None else None,
                "finish_reason": finish,
            }
            if wants_ids:
                choice["token_ids"] = piece.token_ids if piece is not None else []
            return self._envelope(served, "chat.completion.chunk", choice)

        first = chunk({"role": "assistant", "content": ""})
        if wants_ids:
            first["prompt_token_ids"] = served.prompt_token_ids
        chunks = [first]
        tool_index = 0
        for piece in pieces:
            if piece.tool_call is None:
                chunks.append(chunk({"content": piece.text}, piece))
            else:
                chunks.append(chunk({"tool_calls": [{"index": tool_index, **piece.tool_call}]}, piece))
                tool_index += 1
        chunks.append(chunk({}, finish=served.finish_reason))
        stream_options: Any = request.body.get("stream_options") or {}
        if stream_options.get("include_usage"):
            usage_chunk = chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self._usage(served)
            chunks.append(usage_chunk)
        return chunks

    # -- /v1/completions --------------------------------------------------------------------------

    def _completion_logprobs(self, request: ScriptRequest, piece: _Piece) -> dict[str, Any] | None:
        if request.body.get("logprobs") is None:
            return None
        tokens = [_token_text(t) for t in piece.token_ids]
        return {
            "tokens": tokens,
            "token_logprobs": piece.logprobs,
            "top_logprobs": [{token: lp} for token, lp in zip(tokens, piece.logprobs, strict=True)],
            "text_offset": list(range(len(tokens))),
        }

    def _completion_choice(self, request: ScriptRequest, piece: _Piece, finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "text": piece.text,
            "logprobs": self._completion_logprobs(request, piece),
            "finish_reason": finish,
        }
        if self._wants_ids(request):
            choice["token_ids"] = piece.token_ids
        return choice

    def _completion_body(self, request: ScriptRequest, served: Served, pieces: list[_Piece]) -> dict[str, Any]:
        whole = _Piece(served.text, served.token_ids, served.logprobs)
        choice = self._completion_choice(request, whole, served.finish_reason)
        if self._wants_ids(request):
            choice["prompt_token_ids"] = served.prompt_token_ids
        return self._envelope(served, "text_completion", choice) | {"usage": self._usage(served)}

    def _completion_chunks(self, request: ScriptRequest, served: Served, pieces: list[_Piece]) -> list[dict[str, Any]]:
        chunks = [
            self._envelope(served, "text_completion", self._completion_choice(request, piece, None))
            for piece in pieces
            if piece.tool_call is None
        ]
        last = self._completion_choice(request, _Piece("", [], []), served.finish_reason)
        chunks.append(self._envelope(served, "text_completion", last))
        if self._wants_ids(request):
            chunks[0]["choices"][0]["prompt_token_ids"] = served.prompt_token_ids
        return chunks


def first_calls_reach(upstream: ScriptedUpstream, count: int, marker: str) -> asyncio.Event:
    """Make ``upstream`` echo, and return an event set once ``count`` first calls whose user text holds ``marker`` came.

    A test waits on it to act (kill a process, a server) while that many rollouts are inside their
    first call, with no sleep. ``upstream`` must run on this event loop (``async with``).
    """
    reached = asyncio.Event()
    seen = 0

    def script(request: ScriptRequest) -> Reply | str:
        nonlocal seen
        if request.turn == 0 and marker in request.last_user:
            seen += 1
            if seen == count:
                reached.set()
        return echo(request)

    upstream.script = script
    return reached


def _token_text(token_id: int) -> str:
    """The token's text under :func:`encode`, or vLLM's ``token_id:<n>`` for ids that are no character."""
    return _token(token_id)[0]


@functools.cache
def _token(token_id: int) -> tuple[str, tuple[int, ...]]:
    """The token's text and its UTF-8 bytes, worked out once per id: benchmarks stream thousands of tokens
    through this upstream in the same process as the gateway, whose cost they measure. The bytes are a
    tuple (written as a JSON array) because every entry of that id shares them."""
    try:
        token = chr(token_id)
        token.encode()  # a surrogate code point has no UTF-8: it raises here, and gets the placeholder text
    except (ValueError, UnicodeEncodeError):
        token = f"token_id:{token_id}"
    return token, tuple(token.encode())


def _token_logprob(token_id: int, logprob: float, top: int) -> dict[str, Any]:
    token, utf8 = _token(token_id)
    entry: dict[str, Any] = {"token": token, "logprob": logprob, "bytes": utf8}
    if top:
        alternatives = [{"token": f"<alt{i}>", "logprob": logprob - i, "bytes": None} for i in range(1, top)]
        entry["top_logprobs"] = [{"token": token, "logprob": logprob, "bytes": utf8}, *alternatives]
    else:
        entry["top_logprobs"] = []
    return entry


def _error(status_code: int, message: str) -> Response:
    return JSONResponse(_error_body(status_code, message), status_code=status_code)


def _error_body(status_code: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status_code < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status_code}}


async def _sse(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"
