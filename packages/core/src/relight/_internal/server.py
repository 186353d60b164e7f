"""Serve an ASGI app with uvicorn inside a running event loop, or on a thread of its own.

relight's servers (the gateway, the scripted test upstream) live beside other work: the gateway
shares the trainer's loop so it can write spans to the same store, and a test wants a server that
starts on a free port and stops by itself. ``async with`` serves on the caller's loop; ``with``
serves on a background thread with its own loop. uvicorn's own signal handling is left out:
the process that embeds the server decides what Ctrl-C means.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

import uvicorn

from relight._internal import event_loop

__all__ = ["CLIENT_KEEP_ALIVE_SECONDS", "SERVER_KEEP_ALIVE_SECONDS", "AsgiServer"]

T = TypeVar("T")

SERVER_KEEP_ALIVE_SECONDS = 75
"""How long relight's servers keep an idle connection open (uvicorn's default is 5 s)."""
CLIENT_KEEP_ALIVE_SECONDS = 15.0
"""How long relight's clients keep an idle connection for reuse: well under the servers' figure, so the
client always gives a connection up before the server closes it, even across a long event-loop stall
(a request on a connection the server has just closed fails with 'Server disconnected')."""


class AsgiServer:
    """An ASGI app on ``host:port`` (port 0 picks a free one), started and stopped explicitly."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen and serve on the running loop; returns once the socket is bound."""
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=SERVER_KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=5,
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)  # what Server.serve sets up before startup()
        await server.startup()
        if not server.started:
            raise OSError(f"could not serve on {self.host}:{self.port}")
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server = server

    async def stop(self) -> None:
        """Stop listening, finish open requests and close connections; safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            await server.shutdown()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def __enter__(self) -> Self:
        """Serve on a daemon thread with its own event loop, for synchronous callers."""
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = event_loop.new_event_loop()
            self._thread_loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as error:
                failure.append(error)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"relight-server-{self.host}", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop of a server served with ``with`` (its thread's), and return its result."""
        if self._thread_loop is None:
            coroutine.close()
            raise RuntimeError("call() needs a server served on a thread of its own (with `with`)")
        return asyncio.run_coroutine_threadsafe(coroutine, self._thread_loop).result()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._thread_loop is not None and self._thread is not None:
            self._thread_loop.call_soon_threadsafe(self._thread_loop.stop)
            self._thread.join()
        self._thread = self._thread_loop = None
