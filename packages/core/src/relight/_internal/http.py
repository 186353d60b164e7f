"""relight's HTTP/1.1 client to one origin: keep-alive connections on asyncio, responses parsed by httptools.

The gateway's calls to its upstreams, the HTTP store client's calls and a runner's request that ends
an attempt at the gateway all go through here; every LLM call the gateway forwards does, so its cost
is added to every call an agent makes, and it does only what a call to a model server needs (the
figures against aiohttp and httpx are in the docs' design rationale). The parsing is httptools'
(llhttp, which uvicorn's server side already uses): chunked bodies, keep-alive and framing are its.

What it does: one origin (``http``/``https``), a pool of keep-alive connections given up after
``keep_alive`` seconds idle (before the server would close them), requests with a body, responses
read whole or as they arrive (server-sent events), one deadline over the whole exchange, and flow
control so a slow reader never buffers a stream without bound. Every failure (refused connection,
connection lost, malformed response, deadline) is an :class:`OSError`, a :class:`TimeoutError` for
the deadline. It sends ``Accept-Encoding: identity``, follows no redirects and keeps no cookies.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

__all__ = ["HttpClient", "HttpResponse"]

_HIGH_WATER = 256 * 1024
"""Bytes of a response read ahead of its reader before the socket stops being read."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; the response under way is parsed as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: OSError | None = None
        self._body: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._until_eof = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.complete:  # between two exchanges nothing should come: the connection cannot be trusted
            self.fail(ConnectionError("the server sent data between two responses"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self.fail(ConnectionError(f"malformed HTTP response: {error}"))

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self._until_eof and self.headers_done and not self.complete:
            self.on_message_complete()  # a body without a length ends with the connection
        self.fail(ConnectionError(f"the server closed the connection{f': {exc}' if exc else ''}"))

    # -- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-length" or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower()):
            self._until_eof = False

    def on_message_begin(self) -> None:
        self._until_eof = True  # until a length or chunked encoding says otherwise

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- the client's side --------------------------------------------------------------------

    def fail(self, error: OSError) -> None:
        """End the exchange with ``error`` (kept if one came first) and close the connection."""
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and not self._body
            and self.error is None
            and self.transport is not None
            and not self.transport.is_closing()
            and self.keep_alive
        )

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.status, self.headers_done, self.complete, self.keep_alive = 0, False, False, False
        self._body.clear()
        self._buffered = 0
        self.transport.write(data)

    async def wait_for_headers(self) -> None:
        while not self.headers_done:
            await self._wait()

    async def next_body(self) -> bytes | None:
        """The body that has arrived since the last look (every HTTP chunk of it, joined), or None once
        the response is complete. A fast upstream sends a stream's chunks in one read: the reader then
        wakes once for all of them, not once for each."""
        while not self._body:
            if self.complete:
                return None
            await self._wait()
        data = self._body.popleft() if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def _wait(self) -> None:
        if self.error is not None:
            raise self.error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.error is not None and not (self.complete or self._body):
            raise self.error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class HttpResponse:
    """A response whose headers have arrived; read its body with :meth:`read` or :meth:`iter_body`.

    The connection goes back to the pool once the body has been read to its end; :meth:`close`
    (also on leaving ``async with``) closes it instead if the body was not read to the end.
    """

    def __init__(self, client: HttpClient, connection: _Connection, timer: asyncio.TimerHandle) -> None:
        self.status = connection.status
        self._client = client
        self._connection: _Connection | None = connection
        self._timer = timer

    async def next_body(self) -> bytes | None:
        """The next part of the body as it arrived; None at its end, when the connection goes back to the pool."""
        connection = self._connection
        if connection is None:
            return None
        try:
            data = await connection.next_body()
        except BaseException:
            self.close()
            raise
        if data is None:
            self._release(connection.reusable)
        return data

    async def read(self) -> bytes:
        parts: list[bytes] = []
        while (data := await self.next_body()) is not None:
            parts.append(data)
        return b"".join(parts)

    async def iter_body(self) -> AsyncIterator[bytes]:
        while (data := await self.next_body()) is not None:
            yield data

    def close(self) -> None:
        """Give the connection back: to the pool if the response was read to its end, else to be closed."""
        if self._connection is not None:
            self._release(self._connection.reusable)

    async def __aenter__(self) -> HttpResponse:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def _release(self, reuse: bool) -> None:
        connection, self._connection = self._connection, None
        self._timer.cancel()
        if connection is not None:
            self._client.give_back(connection, reuse)


class HttpClient:
    """Requests to the origin of ``base_url`` (``http://host:port/v1``); paths are appended to its path.

    Args:
        headers: sent with every request (``Authorization``).
        timeout: seconds one exchange may take, from asking for a connection to the body's last byte.
        keep_alive: seconds an idle connection is kept for reuse.
        max_connections: connections open at once; more requests wait for one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        keep_alive: float = 2.0,
        max_connections: int = 1024,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an upstream URL must be http:// or https:// with a host, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.keep_alive = keep_alive
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = parts.port is None or self.port == (443 if self._tls else 80)
        lines = [f"Host: {host}" if default_port else f"Host: {host}:{self.port}", "Accept-Encoding: identity"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self._headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: collections.deque[_Connection] = collections.deque()
        self._busy: set[_Connection] = set()
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        content_type: str = "",
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> HttpResponse:
        """Send a request and return once the response's headers are in. Raises OSError or TimeoutError.

        ``headers`` are sent beside the client's; ``timeout`` replaces the client's for this exchange
        (a long poll's is longer).
        """
        if self._closed:
            raise ConnectionError("the HTTP client is closed")
        loop = asyncio.get_running_loop()
        timeout = self.timeout if timeout is None else timeout
        deadline = loop.time() + timeout
        if self._slots.locked():
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        else:
            await self._slots.acquire()
        connection: _Connection | None = None
        try:
            connection = self._reuse(loop) or await self._connect(loop, deadline)
            self._busy.add(connection)
            timer = loop.call_at(deadline, connection.fail, TimeoutError(f"no answer within {timeout:g} s"))
            head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._headers
            if headers:
                head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")
            if body or method != "GET":
                kind = f"Content-Type: {content_type}\r\n" if content_type else ""
                head += f"{kind}Content-Length: {len(body)}\r\n".encode("latin-1")
            connection.send(head + b"\r\n" + body)
            try:
                await connection.wait_for_headers()
            except BaseException:
                timer.cancel()
                raise
        except BaseException:
            if connection is not None:
                connection.fail(ConnectionError("the request was abandoned"))
                self._busy.discard(connection)
            self._slots.release()
            raise
        return HttpResponse(self, connection, timer)

    def give_back(self, connection: _Connection, reuse: bool) -> None:
        """Keep a connection whose exchange ended for the next request, or close it."""
        self._slots.release()
        self._busy.discard(connection)
        if reuse and connection.reusable and not self._closed:
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle.append(connection)
        else:
            connection.fail(ConnectionError("the connection was closed"))

    async def aclose(self) -> None:
        """Close every connection: exchanges still under way end with an OSError (a long poll too)."""
        self._closed = True
        while self._idle:
            self._idle.pop().fail(ConnectionError("the HTTP client is closed"))
        for connection in list(self._busy):
            connection.fail(ConnectionError("the HTTP client is closed"))

    def _reuse(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        """The most recently used idle connection that is still open and fresh; staler ones are closed."""
        oldest = loop.time() - self.keep_alive
        while self._idle:
            connection = self._idle.pop()
            if connection.idle_since <= oldest:  # and every connection below it has been idle longer still
                self._idle.append(connection)
                while self._idle:
                    self._idle.popleft().fail(ConnectionError("idle for too long"))
            elif connection.reusable:
                return connection
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        async with asyncio.timeout_at(deadline):
            _, connection = await loop.create_connection(
                lambda: _Connection(loop),
                self.host,
                self.port,
                ssl=self._tls,
                server_hostname=self.host if self._tls else None,
            )
        return connection
