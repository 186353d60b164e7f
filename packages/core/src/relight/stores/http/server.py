"""The store server: any :class:`relight.store.Store` behind a small JSON API.

Runners, gateways and trainers in other processes or on other machines share one store through
it: ``relight store serve --store sqlite:///runs/store.db`` on one machine, and
``relight.open_store("http://host:8765")`` (:class:`relight.stores.http.HttpStore`) everywhere else.

- Claims and waits are long polls: the server holds a request until there is an answer or
  ``max_poll_seconds`` pass, and the client asks again, so nothing polls on a timer.
- A bearer token is required whenever the server binds beyond the loopback interface; it refuses
  to start without one.
- Request bodies over ``max_body_bytes`` are refused with 413 and the reason, before any of the
  body reaches the store; store errors come back as 404/409/422 naming their exception class, and
  malformed bodies as 422 naming the fields.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import signal
import socket
import threading
from collections.abc import Callable, Coroutine, Generator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any, TypeVar

import uvicorn
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relight._internal.server import SERVER_KEEP_ALIVE_SECONDS
from relight.errors import ConfigError, RelightError, StoreError
from relight.records import Mode, RolloutStatus, Span
from relight.store import Store
from relight.stores._json import spans_json
from relight.stores.http import _wire
from relight.stores.http._once import RequestMemory
from relight.stores.http._wire import (
    ATTEMPTS,
    CLAIMED,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_POLL_SECONDS,
    RECORDED,
    ROLLOUTS,
    SPANS,
    CancelBody,
    ClaimBody,
    Claimed,
    EnqueueBody,
    FinishBody,
    HeartbeatBody,
    MetadataBody,
    PublishBody,
    RecordBody,
    SummariesBody,
    WaitBody,
)

__all__ = ["check_exposure", "create_app", "running_server", "serve"]

T = TypeVar("T")

_JSON = "application/json"
_GRACE_SECONDS = 1
"""How long shutdown waits for requests in flight; cut-off long polls are simply asked again."""


def create_app(
    store: Store,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_poll_seconds: float = DEFAULT_MAX_POLL_SECONDS,
) -> FastAPI:
    """The ASGI app serving ``store``; requests need ``Authorization: Bearer <token>`` when a token is set."""
    # FastAPI, unlike the gateway: the store's API is a contract between processes, so its bodies are
    # pydantic models validated into specific 422s, at a cost a store call can afford and an LLM call not.
    app = FastAPI(title="relight store", version=_wire.PREFIX.strip("/"), docs_url=None, redoc_url=None)
    app.include_router(_routes(store, max_poll_seconds))
    app.add_exception_handler(RelightError, _store_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(_ClientLeft, _nobody_to_answer)
    app.add_exception_handler(RecursionError, _too_deep)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    app.add_middleware(_Guard, token=token, max_body_bytes=max_body_bytes)
    return app


def _routes(store: Store, max_poll_seconds: float) -> APIRouter:  # noqa: C901 (one branch per route: a flat table)
    api = APIRouter(prefix=_wire.PREFIX)
    memory = RequestMemory()

    def request_id(request: Request) -> str | None:
        return request.headers.get(_wire.REQUEST_ID_HEADER)

    @api.post("/rollouts")
    async def enqueue(body: EnqueueBody) -> Response:
        return _reply(ROLLOUTS.dump_json(await store.enqueue(body.requests)))

    @api.post("/rollouts/recorded")
    async def record_rollouts(body: RecordBody, request: Request) -> Response:
        async def act() -> Response:
            recorded = await store.record_rollouts(
                body.requests, worker_id=body.worker_id, lease_seconds=body.lease_seconds
            )
            return _reply(RECORDED.dump_json([Claimed(rollout=r, attempt=a) for r, a in recorded]))

        return await memory.once(request_id(request), act)

    @api.get("/rollouts")
    async def list_rollouts(
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        group_id: str | None = None,
        limit: Annotated[int | None, Query(ge=0)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> Response:
        rollouts = await store.list_rollouts(status=status, mode=mode, group_id=group_id, limit=limit, offset=offset)
        return _reply(ROLLOUTS.dump_json(rollouts))

    @api.post("/summaries")
    async def list_summaries(body: SummariesBody) -> Response:
        page = await store.list_summaries(body.where, limit=body.limit, offset=body.offset)
        return _reply(page.model_dump_json())

    @api.get("/rollout")
    async def get_rollout(rollout_id: str) -> Response:
        return _reply((await store.get_rollout(rollout_id)).model_dump_json())

    @api.get("/attempts")
    async def list_attempts(rollout_id: str) -> Response:
        return _reply(ATTEMPTS.dump_json(await store.list_attempts(rollout_id)))

    @api.post("/claim")
    async def claim(body: ClaimBody, request: Request) -> Response:
        async def act() -> Response:
            claiming = store.claim(
                body.worker_id,
                lease_seconds=body.lease_seconds,
                timeout=min(body.timeout, max_poll_seconds),
                mode=body.mode,
            )
            claimed = await _unless_disconnected(request, claiming)
            return _reply(
                CLAIMED.dump_json(None if claimed is None else Claimed(rollout=claimed[0], attempt=claimed[1]))
            )

        return await memory.once(request_id(request), act)

    @api.post("/heartbeat")
    async def heartbeat(body: HeartbeatBody) -> Response:
        attempt = await store.heartbeat(body.rollout_id, body.attempt_id, lease_seconds=body.lease_seconds)
        return _reply(attempt.model_dump_json())

    @api.post("/finish")
    async def finish_attempt(body: FinishBody, request: Request) -> Response:
        async def act() -> Response:
            rollout = await store.finish_attempt(body.rollout_id, body.attempt_id, body.status, error=body.error)
            return _reply(rollout.model_dump_json())

        return await memory.once(request_id(request), act)

    @api.post("/cancel")
    async def cancel(body: CancelBody) -> Response:
        return _reply(ROLLOUTS.dump_json(await store.cancel(body.rollout_ids)))

    @api.post("/metadata")
    async def update_metadata(body: MetadataBody) -> Response:
        return _reply((await store.update_metadata(body.rollout_id, body.metadata)).model_dump_json())

    @api.post("/wait")
    async def wait(body: WaitBody, request: Request) -> Response:
        timeout = max_poll_seconds if body.timeout is None else min(body.timeout, max_poll_seconds)
        rollouts = await _unless_disconnected(request, store.wait(body.rollout_ids, timeout=timeout))
        return _reply(ROLLOUTS.dump_json(rollouts))

    @api.post("/spans", status_code=204)
    async def add_spans(request: Request) -> Response:
        await store.add_spans(_parse_spans(await request.body()))
        return Response(status_code=204)

    @api.get("/spans")
    async def query_spans(rollout_id: str, attempt_id: str | None = None) -> Response:
        return _reply(spans_json(await store.query_spans(rollout_id, attempt_id)))

    @api.post("/resources")
    async def publish_resources(body: PublishBody, request: Request) -> Response:
        async def act() -> Response:
            return _reply((await store.publish_resources(body.items)).model_dump_json())

        return await memory.once(request_id(request), act)

    @api.get("/resources")
    async def get_resources(version: Annotated[int | None, Query(ge=0)] = None) -> Response:
        return _reply((await store.get_resources(version)).model_dump_json())

    @api.get("/stats")
    async def stats() -> Response:
        return _reply((await store.stats()).model_dump_json())

    @api.get("/health")
    async def health() -> Response:
        return _reply(b'{"status":"ok"}')

    return api


class _ClientLeft(Exception):
    """The client of a long poll hung up (a runner process stopping, say): there is nobody to answer."""


async def _unless_disconnected(request: Request, long_poll: Coroutine[Any, Any, T]) -> T:
    """Await a long poll, abandoning it if the client goes away first.

    Otherwise a claim could start an attempt for a worker that is no longer listening, which would
    hold the rollout until its lease ran out; it also lets the server stop without waiting for polls.

    Raises:
        _ClientLeft: the client went away; answered by :func:`_nobody_to_answer`, quietly.
    """
    polling = asyncio.ensure_future(long_poll)
    leaving = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait((polling, leaving), return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        polling.cancel()  # nothing when it has finished
    if not polling.done():
        raise _ClientLeft
    return polling.result()


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _parse_spans(body: bytes) -> list[Span]:
    """Spans straight from the JSON bytes: the hot path skips FastAPI's parse-then-validate."""
    try:
        return SPANS.validate_json(body)
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False, include_context=False)]
        ) from error


def _reply(content: bytes | str) -> Response:
    return Response(content, media_type=_JSON)


async def _store_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, RelightError)
    status = _wire.status_of(error)
    return Response(_wire.error_body(type(error).__name__, str(error)), status_code=status, media_type=_JSON)


async def _nobody_to_answer(request: Request, error: Exception) -> Response:
    """An answer the server drops (the connection is gone), so the abandoned poll ends as a normal request."""
    return Response(status_code=499)


async def _http_error(request: Request, error: Exception) -> Response:
    """FastAPI's own refusals (a body it cannot parse, an unknown path) in this API's error shape."""
    assert isinstance(error, HTTPException)
    body = _wire.error_body(type(error).__name__, str(error.detail))
    return Response(body, status_code=error.status_code, media_type=_JSON, headers=error.headers)


async def _too_deep(request: Request, error: Exception) -> Response:
    detail = "body: the JSON nests too deeply to parse"
    return Response(_wire.error_body("ValidationError", detail), status_code=400, media_type=_JSON)


async def _internal_error(request: Request, error: Exception) -> Response:
    """Anything unforeseen still answers in the API's JSON shape (its traceback goes to the server's log)."""
    return Response(_wire.error_body("InternalError", repr(error)), status_code=500, media_type=_JSON)


async def _invalid_request(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    problems = [
        {"loc": list(problem.get("loc", ())), "msg": str(problem.get("msg", "")), "type": problem.get("type")}
        for problem in error.errors()
    ]
    detail = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)
    content = json.dumps({"error": "ValidationError", "detail": detail, "errors": problems}, default=str)
    return Response(content, status_code=422, media_type=_JSON)


class _Guard:
    """Turns a request away before it reaches the store: a wrong token (401) or too large a body (413)."""

    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.expected = None if token is None else f"Bearer {token}".encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.expected is not None and not hmac.compare_digest(
            headers.get("authorization", "").encode(), self.expected
        ):
            detail = "this store server needs 'Authorization: Bearer <token>' with its token"
            await _refuse(send, 401, "Unauthorized", detail, [(b"www-authenticate", b"Bearer")])
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _refuse(send, 413, "ContentTooLarge", self._too_large(int(declared)))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _refuse(send, 413, "ContentTooLarge", self._too_large(size))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    def _too_large(self, size: int) -> str:
        return (
            f"the request body ({size} bytes or more) is over this store server's limit of "
            f"{self.max_body_bytes} bytes; send smaller batches"
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then passes on (so disconnects still arrive)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _refuse(
    send: Send, status: int, error: str, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = _wire.error_body(error, detail)
    start_headers = [(b"content-type", _JSON.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start_headers + (headers or [])})
    await send({"type": "http.response.body", "body": body})


# -- running it ---------------------------------------------------------------------------------


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve beyond the loopback interface without a token."""
    if token:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"refusing to serve the store on {host!r} without a token: anyone who can reach it could read and "
            "change it. Pass --token (or set RELIGHT_STORE_TOKEN), or bind 127.0.0.1"
        )


def _prepare(
    store: Store, host: str, port: int, token: str | None, keep_alive_seconds: float, **app_options: Any
) -> tuple[uvicorn.Server, socket.socket, str]:
    check_exposure(host, token)
    config = uvicorn.Config(
        create_app(store, token=token, **app_options),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=keep_alive_seconds,  # pyright: ignore[reportArgumentType]  (uvicorn takes any number)
        timeout_graceful_shutdown=_GRACE_SECONDS,
    )
    sock = _listen(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return uvicorn.Server(config), sock, f"http://{shown}:{bound_port}"


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, so the URL is known and connections queue before the server has started.

    Made with ``IPPROTO_TCP`` rather than 0: asyncio turns Nagle's algorithm off only on sockets
    that say they are TCP, and with it on every small reply waits ~40 ms for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise StoreError(f"cannot listen on {host}:{port}: {error}") from error
    return sock


async def serve(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
    keep_alive_seconds: float = SERVER_KEEP_ALIVE_SECONDS,
    **app_options: Any,
) -> None:
    """Serve ``store`` until the task is cancelled or the process gets SIGINT/SIGTERM; then close it.

    Args:
        port: 0 picks a free port; ``on_ready`` is called with the URL once the socket listens.
        keep_alive_seconds: how long an idle connection is kept; keep it above the clients' (15 s).
        app_options: ``max_body_bytes`` and ``max_poll_seconds`` for :func:`create_app`.

    Raises:
        ConfigError: ``host`` is beyond the loopback interface and there is no token.
    """
    server, sock, url = _prepare(store, host, port, token, keep_alive_seconds, **app_options)
    with _stop_on_signals(server):
        try:
            if on_ready is not None:
                on_ready(url)
            await server.serve(sockets=[sock])
        finally:
            sock.close()
            await store.close()


@contextmanager
def _stop_on_signals(server: uvicorn.Server) -> Generator[None]:
    """Let SIGINT and SIGTERM stop the server gracefully, also before uvicorn has started listening.

    uvicorn handles them while it serves, then raises them again once it has stopped; this handler
    is the one they reach then, so ``serve`` returns normally and the store is closed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def running_server(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    keep_alive_seconds: float = SERVER_KEEP_ALIVE_SECONDS,
    **app_options: Any,
) -> Generator[str]:
    """Serve ``store`` from a thread with its own event loop while the block runs; yields the URL.

    The store is used only from the server's thread from then on, and is closed when the block
    ends. For tests and benchmarks; ``relight store serve`` is the way to run one for real.
    """
    server, sock, url = _prepare(store, host, port, token, keep_alive_seconds, **app_options)
    failures: list[BaseException] = []

    def run() -> None:
        async def main() -> None:
            try:
                await server.serve(sockets=[sock])
            finally:
                await store.close()

        try:
            asyncio.run(main())
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run, name="relight-store-server", daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
    if failures:
        raise StoreError(f"the store server at {url} failed: {failures[0]!r}") from failures[0]
