"""The gateway's HTTP face: OpenAI's endpoints, scoped to a rollout attempt by path or by API key.

Every route is served twice: under ``/rollouts/{rollout_id}/attempts/{attempt_id}`` and at the
root, where the ``rlk-…`` key (``Authorization: Bearer``, or ``x-api-key`` as Anthropic's clients send it)
names the attempt. Every request the gateway refuses is counted, and one of an admitted attempt is
recorded as a failed LLM span (:meth:`Gateway.refused`). Errors come back in
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``) so client libraries raise
their usual exceptions with our reason in them.

Each handler is the same few steps, which a new endpoint reuses: :func:`gateway_of` the request,
:meth:`Gateway.session`, :func:`read_json`, then :meth:`Gateway.complete` or :meth:`Gateway.stream`
(which forward to the rollout's replica and record the LLM span), then :func:`json_response` or
:func:`sse_response`. ``/v1/responses`` translates with :mod:`relight.gateway.dialects.responses` around a chat call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, cast

from pydantic import JsonValue
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from relight._internal.ids import random_hex
from relight.gateway import _json
from relight.gateway.calls.record import TraceParent
from relight.gateway.calls.routing import role_of_headers
from relight.gateway.calls.validate import check_content_type
from relight.gateway.dialects import anthropic, responses
from relight.gateway.errors import GatewayError, UpstreamError, error_body
from relight.gateway.http.fast_routes import ErrorHandler, HotRoutes
from relight.gateway.sessions import attempt_of_request
from relight.gateway.upstreams import Endpoint, UpstreamPool
from relight.gateway.urls import ATTEMPT_SCOPE, END_ATTEMPT
from relight.tracing.context import AttemptRef

__all__ = ["SCOPES", "create_app", "gateway_of", "json_response", "note_refusal", "read_json", "sse_response"]

Json = dict[str, Any]

SCOPES = (ATTEMPT_SCOPE, "")
"""Route prefixes: by path, and at the root with the attempt named by the API key."""


class GatewayService(Protocol):
    """What the HTTP face needs of :class:`relight.gateway.Gateway`, which serves it."""

    max_body_bytes: int
    pool: UpstreamPool

    async def session(self, request: Request) -> AttemptRef: ...

    async def complete(
        self,
        session: AttemptRef,
        endpoint: Endpoint,
        body: Json,
        *,
        response_id: str | None = None,
        trace_parent: TraceParent | None = None,
        attributes: dict[str, JsonValue] | None = None,
        role: str | None = None,
        cap_budget: bool = False,
    ) -> Json: ...

    def stream(
        self,
        session: AttemptRef,
        endpoint: Endpoint,
        body: Json,
        *,
        response_id: str | None = None,
        trace_parent: TraceParent | None = None,
        attributes: dict[str, JsonValue] | None = None,
        keep_prompt_ids: bool = False,
        role: str | None = None,
        cap_budget: bool = False,
    ) -> AsyncIterator[Iterator[Json]]: ...

    async def end_attempt(self, session: AttemptRef) -> None: ...

    def refused(self, session: AttemptRef | None, request: Json | None, error: GatewayError) -> None: ...


def create_app(gateway: GatewayService) -> HotRoutes:
    endpoints = (
        (END_ATTEMPT, _end_attempt, "POST"),
        ("/v1/chat/completions", _chat, "POST"),
        ("/v1/completions", _completions, "POST"),
        ("/v1/models", _models, "GET"),
        ("/v1/responses", _responses, "POST"),
        ("/v1/messages", _messages, "POST"),
    )
    # Plain Starlette, not FastAPI: the handlers read the request themselves, and FastAPI's middleware
    # and dependency solving would only add latency to every LLM call.
    routes = [
        Route(prefix + path, _recording_refusals(handler), methods=[method])
        for prefix in SCOPES
        for path, handler, method in endpoints
    ]
    handlers: dict[type[Exception], ErrorHandler] = {GatewayError: _gateway_error, HTTPException: _http_error}
    app = Starlette(routes=routes, exception_handlers={**handlers, Exception: _internal_error})
    app.state.gateway = gateway
    hot = {"/v1/chat/completions": _recording_refusals(_chat), "/v1/completions": _recording_refusals(_completions)}
    return HotRoutes(app, hot, handlers, _internal_error)


def _recording_refusals(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler``, with every GatewayError it raises counted and, for an admitted attempt, recorded as a
    failed LLM span (:meth:`Gateway.refused`): what the gateway refuses must show where calls show."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except GatewayError as error:
            note_refusal(request, error)
            raise

    return handle


def note_refusal(request: Request, error: GatewayError) -> None:
    """Hand a refusal to :meth:`Gateway.refused` with what is known of the request (its attempt, its body)."""
    state = request.state
    # A 409's attempt has ended (its record is closed) and spans_lost answers the runner's end call, not an
    # LLM call: both are counted, not recorded.
    attributable = error.status_code != 409 and error.code != "spans_lost"
    session = getattr(state, "relight_session", None) if attributable else None
    gateway_of(request).refused(session, getattr(state, "relight_body", None), error)


def gateway_of(request: Request) -> GatewayService:
    return cast(GatewayService, request.app.state.gateway)


async def read_json(request: Request) -> Json:
    """The request's JSON object. Raises GatewayError: 415 for a body declared as anything but JSON, 413 over the
    size limit, 400 if it is not a JSON object."""
    check_content_type(request.headers.get("content-type"))
    limit = gateway_of(request).max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, f"the request body has {declared} bytes; the gateway accepts at most {limit}")
    body = bytearray()
    try:
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise GatewayError(413, f"the request body is over the gateway's limit of {limit} bytes")
    except ClientDisconnect:  # a runner killed mid-request: nobody to answer, nothing to log
        raise GatewayError(400, "the client went away before its request arrived") from None
    try:
        parsed = _json.loads(body)
    except ValueError as error:
        raise GatewayError(400, f"the request body is not valid JSON: {error}") from None
    except RecursionError:
        raise GatewayError(400, "the request body nests JSON too deeply to parse") from None
    if not isinstance(parsed, dict):
        raise GatewayError(400, f"the request body must be a JSON object, not {type(parsed).__name__}")
    request.state.relight_body = parsed  # what a refused request asked, for its span
    return cast(Json, parsed)


def json_response(content: Json, status_code: int = 200, *, headers: dict[str, str] | None = None) -> Response:
    return Response(_json.dumps(content), status_code, headers=headers, media_type="application/json")


async def sse_response(events: AsyncIterator[bytes], *, gathered: bool = False, last: bytes = b"") -> Response:
    """Stream server-sent events. The first event is awaited here, so a GatewayError raised before
    anything was sent is still an ordinary HTTP error with its status code.

    Events that are ready together go out in one write (:func:`_bursts`). ``gathered`` says that
    each item of ``events`` already holds all that were (a route that reads its upstream in bursts,
    :meth:`Gateway.stream`): they go out as they come, without a task to gather them. ``last`` (OpenAI's
    ``data: [DONE]``) goes out with the end of the body, in the same write.
    """
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = b""

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for burst in events if gathered else _bursts(events):
            yield burst

    headers = {"Cache-Control": "no-cache"}
    return EventStreamResponse(body(), media_type="text/event-stream", headers=headers, last=last)


class EventStreamResponse(StreamingResponse):
    """Starlette's streaming response, minus the anyio task group it starts for every response under
    uvicorn (ASGI 2.3) to notice a client that goes away, and with ``last`` sent in the write that
    ends the body (one socket write and one wake-up of the client fewer per stream).

    A plain task watches for the disconnect instead and cancels the sending task, as the task
    group's cancel scope does, at a fraction of its cost per stream.
    """

    def __init__(self, content: AsyncIterator[bytes], *, last: bytes = b"", **options: Any) -> None:
        super().__init__(content, **options)
        self.last = last

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sending = asyncio.current_task()
        assert sending is not None
        watching = asyncio.create_task(_cancel_on_disconnect(receive, sending))
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not watching.done() or watching.cancelled():
                raise  # cancelled by someone else (the server shutting down)
            sending.uncancel()  # the client went away: the response is over, not the server's task
        finally:
            watching.cancel()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": self.last, "more_body": False})


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()


async def _bursts(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``events`` with those that are ready together joined, to go out in one write.

    A fast upstream sends many chunks in one read, and each write costs an ASGI message and a socket
    send (~1 ms over a 50-chunk reply). A task of its own draws the events, so the ones that have
    gathered by the time this side wakes form a burst, and no event waits for a later one.
    """
    ready: list[bytes] = []
    ended: list[Exception | None] = []  # None once the events are over, or the error that ended them
    arrived = asyncio.Event()  # a list and an event: an asyncio.Queue costs ~0.3 µs more per event

    async def draw() -> None:
        try:
            async for event in events:
                ready.append(event)
                arrived.set()
        except Exception as error:  # raised on this side
            ended.append(error)
        else:
            ended.append(None)
        arrived.set()

    drawing = asyncio.create_task(draw())
    try:
        while True:
            await arrived.wait()
            arrived.clear()
            over = bool(ended)  # looked at first: every event drawn before the end is in `ready` now
            if ready:
                burst = b"".join(ready)
                ready.clear()
                yield burst
            if over:
                if ended[0] is not None:
                    raise ended[0]
                return
    finally:
        drawing.cancel()


async def _chat(request: Request) -> Response:
    return await _serve("chat", request)


async def _completions(request: Request) -> Response:
    return await _serve("completions", request)


async def _serve(endpoint: Endpoint, request: Request) -> Response:
    gateway = gateway_of(request)
    session = await gateway.session(request)
    body = await read_json(request)
    headers = request.headers
    trace_parent = TraceParent.parse(headers.get("traceparent"))
    role = role_of_headers(headers)
    if not body.get("stream"):
        return json_response(await gateway.complete(session, endpoint, body, trace_parent=trace_parent, role=role))
    bursts = gateway.stream(session, endpoint, body, trace_parent=trace_parent, role=role)
    return await sse_response(_openai_events(bursts), gathered=True, last=b"data: [DONE]\n\n")


async def _openai_events(bursts: AsyncIterator[Iterator[Json]]) -> AsyncIterator[bytes]:
    """OpenAI's SSE framing, the chunks that arrived together in one piece; a failure midway becomes an
    error event, as OpenAI's servers send (``data: [DONE]`` follows with the end of the body)."""
    started = False
    try:
        async for burst in bursts:
            if events := [b"data: " + _json.dumps(chunk) + b"\n\n" for chunk in burst]:
                started = True
                yield b"".join(events)
    except GatewayError as error:
        if not started:
            raise
        yield b"data: " + _json.dumps(error.body()) + b"\n\n"


async def _responses(request: Request) -> Response:
    """The Responses API, translated to a chat call by :mod:`relight.gateway.dialects.responses` and recorded as one."""
    gateway = gateway_of(request)
    session = await gateway.session(request)
    body = await read_json(request)
    translation = responses.chat_request(body)
    chat, marks = translation.chat, translation.span_attributes()
    trace_parent = TraceParent.parse(request.headers.get("traceparent"))
    role = role_of_headers(request.headers)
    if not chat.get("stream"):
        answer = await gateway.complete(
            session, "chat", chat, trace_parent=trace_parent, attributes=marks, role=role, cap_budget=True
        )
        return json_response(responses.response_from_chat(body, answer, translation.namespaced))
    chat["stream_options"] = {"include_usage": True}
    translator = responses.ResponseStream(body, translation.namespaced)

    async def events() -> AsyncIterator[bytes]:
        try:
            bursts = gateway.stream(
                session, "chat", chat, trace_parent=trace_parent, attributes=marks, role=role, cap_budget=True
            )
            async for burst in bursts:
                if framed := [responses.sse(event) for chunk in burst for event in translator.feed(chunk)]:
                    yield b"".join(framed)
            closing = translator.finish()
        except GatewayError as error:
            if not translator.started:
                raise
            closing = translator.fail(error.message, error.code)
        yield b"".join([responses.sse(event) for event in closing])

    return await sse_response(events(), gathered=True)


async def _messages(request: Request) -> Response:
    """Anthropic's Messages API, translated to a chat call by :mod:`relight.gateway.dialects.anthropic`; errors in
    its shape."""
    try:
        return await _serve_messages(request)
    except GatewayError as error:
        note_refusal(request, error)
        return json_response(anthropic.error_body_of(error), error.status_code, headers=error.headers)


async def _serve_messages(request: Request) -> Response:
    gateway = gateway_of(request)
    if not request.headers.get("anthropic-version"):
        raise GatewayError(400, "anthropic-version: header is required")
    session = await gateway.session(request)
    body = await read_json(request)
    chat = anthropic.chat_request(body)
    message_id = f"msg_{random_hex(24)}"
    trace_parent = TraceParent.parse(request.headers.get("traceparent"))
    role = role_of_headers(request.headers)
    if not chat.get("stream"):
        answer = await gateway.complete(
            session, "chat", chat, response_id=message_id, trace_parent=trace_parent, role=role, cap_budget=True
        )
        return json_response(anthropic.message_from_chat(answer, message_id))
    chat["stream_options"] = {"include_usage": True}
    translator = anthropic.MessageStream(str(chat["model"]), message_id)

    async def events() -> AsyncIterator[bytes]:
        bursts = gateway.stream(
            session,
            "chat",
            chat,
            response_id=message_id,
            trace_parent=trace_parent,
            keep_prompt_ids=True,
            role=role,
            cap_budget=True,
        )
        try:
            async for burst in bursts:
                if framed := [anthropic.sse(event) for chunk in burst for event in translator.feed(chunk)]:
                    yield b"".join(framed)
        except GatewayError as error:
            if not translator.started:
                raise
            yield anthropic.sse(anthropic.error_body_of(error))
            return
        yield b"".join([anthropic.sse(event) for event in translator.finish()])

    return await sse_response(events(), gathered=True)


async def _models(request: Request) -> Response:
    gateway = gateway_of(request)
    await gateway.session(request)
    names: list[str] = []
    for upstream in gateway.pool.upstreams:
        try:
            names += [name for name in await upstream.models() if name not in names]
        except UpstreamError as error:
            raise GatewayError(502, f"upstream failure ({upstream.name}): {error.message}") from error
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "relight"} for name in names]
    return json_response({"object": "list", "data": data})


async def _end_attempt(request: Request) -> Response:
    """The runner ends an attempt: calls are refused from now on, and the answer waits for their spans."""
    session = attempt_of_request(request)
    await gateway_of(request).end_attempt(session)
    return json_response({"rollout_id": session.rollout_id, "attempt_id": session.attempt_id, "ended": True})


async def _gateway_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, GatewayError)
    response = json_response(error.body(), error.status_code)
    response.headers.update(error.headers)
    return response


async def _internal_error(request: Request, error: Exception) -> Response:
    """Anything unforeseen still answers in OpenAI's shape (the traceback goes to the server's log)."""
    return json_response(error_body(500, f"internal gateway error: {error!r}", code="internal_error"), 500)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    response = json_response(error_body(error.status_code, str(error.detail)), error.status_code)
    response.headers.update(error.headers or {})  # a 405's Allow
    return response
