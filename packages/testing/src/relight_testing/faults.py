"""Real faults for tests and benchmarks: a TCP proxy that drops connections, a store server process to kill,
and relight's own instrumentation made to raise.

:class:`DroppingProxy` sits between an HTTP client and an HTTP/1.1 server (relight's store server,
its gateway) and forwards every request untouched, except those it was told to drop: it closes the
client's connection either before the request reaches the server (the client sees ``Server
disconnected``, as on a keep-alive connection the server had just closed) or after the server has
acted and answered (the reply is lost: a retry must not act twice). Nothing is mocked: the client,
the server and the sockets are the real ones.

:class:`StoreServerProcess` runs ``relight store serve`` as a child process on a SQLite file, so a
test can SIGKILL it and start it again on the same file and port.

:func:`break_instrumentation` makes one place of relight's own instrumentation raise in this process
(:data:`INSTRUMENTATION_FAULTS` names them: the tracer, the span processor's hooks, the span
batcher's submit, write and flush, an adapter's role hook, reward emission) until
:func:`mend_instrumentation`; an agent can call it in a runner process, by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

__all__ = [
    "INSTRUMENTATION_FAULTS",
    "DroppingProxy",
    "InstrumentationFault",
    "StoreServerProcess",
    "break_instrumentation",
    "free_port",
    "mend_instrumentation",
]

When = Literal["before", "after"]


@dataclass(slots=True)
class _Fault:
    path: str
    when: When
    left: int


class DroppingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (``http://host:port``); drops the requests :meth:`drop` names.

    Use it as ``async with DroppingProxy(url) as proxy``; ``proxy.url`` is where clients connect.
    ``requests`` counts requests by path, ``dropped`` those dropped, ``connections`` client connections.
    """

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._faults: list[_Fault] = []
        self._server: asyncio.Server | None = None
        self._answered: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.connections = 0
        self.url = ""

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def drop(self, path: str, *, when: When = "before", count: int = 1) -> None:
        """Drop the connection of the next ``count`` requests to ``path`` (``/v1/claim``), ``before`` or ``after``
        the server has answered them."""
        self._faults.append(_Fault(path, when, count))

    def answered(self, path: str) -> asyncio.Event:
        """Set once a request to ``path`` has been answered through the proxy."""
        return self._answered.setdefault(path, asyncio.Event())

    def _take(self, path: str) -> When | None:
        for fault in self._faults:
            if fault.path == path and fault.left > 0:
                fault.left -= 1
                self.dropped[path] += 1
                return fault.when
        return None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        server_writer: asyncio.StreamWriter | None = None
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._target)
            while True:
                request = await _read_message(client_reader)
                if request is None:
                    return
                head, _ = request
                path = head.split(b" ", 2)[1].split(b"?", 1)[0].decode()
                self.requests[path] += 1
                fault = self._take(path)
                if fault == "before":
                    return
                server_writer.write(b"".join(request))
                await server_writer.drain()
                reply = await _read_message(server_reader)
                if reply is None or fault == "after":
                    return
                client_writer.write(b"".join(reply))
                await client_writer.drain()
                self.answered(path).set()
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            self._tasks.discard(task)
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 message with a ``Content-Length`` body (or none), as (head, body); None at end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head, await reader.readexactly(length)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StoreServerProcess:
    """``relight store serve --store sqlite:///<path>`` in a child process on a fixed port.

    :meth:`start` returns once it listens; :meth:`kill` sends SIGKILL; :meth:`stop` SIGTERM.
    """

    def __init__(self, path: Path, *, port: int | None = None, env: Mapping[str, str] | None = None) -> None:
        self.path = path
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "relight.cli", "store", "serve", "--store", f"sqlite:///{self.path}"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)], stdout=subprocess.PIPE, text=True, env=self._env
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "serving … at http://…", printed once it listens
        if "serving" not in line:
            self.process.kill()
            raise RuntimeError(f"relight store serve did not start: {line!r} (exit code {self.process.wait()})")

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self._close_pipe()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()

    def __enter__(self) -> StoreServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class InstrumentationFault(RuntimeError):
    """What a broken place of relight's instrumentation raises (:func:`break_instrumentation`)."""


def _raising(place: str) -> Callable[..., Any]:
    def broken(*args: object, **kwargs: object) -> Any:
        raise InstrumentationFault(f"relight's {place} is broken (a fault injected by a test)")

    return broken


class _BrokenTracer:
    """relight's tracer whose every span fails to start."""

    def __init__(self) -> None:
        self.start_span = _raising("tracer")
        self.start_as_current_span = _raising("tracer")


def _fault_target(place: str) -> tuple[object, str, Any]:
    """(object, attribute, replacement) that breaks ``place``."""
    from relight.tracing import agent_spans, otel
    from relight.tracing.batcher import SpanBatcher

    if place == "reward_emission":
        from relight.tracing.rewards import AttemptRewards

        return AttemptRewards, "add", _raising("reward emission")
    targets: dict[str, tuple[object, str, Any]] = {
        "tracer": (otel, "tracer", lambda: _BrokenTracer()),
        "processor.on_start": (otel, "current_attempt", _raising("span processor's on_start")),
        "processor.on_end": (otel, "otel_to_span", _raising("span processor's on_end")),
        "batcher.submit": (SpanBatcher, "submit_many", _raising("span batcher's submit")),
        "batcher.write": (SpanBatcher, "_write", _raising("span batcher's write")),
        "batcher.flush": (SpanBatcher, "flush_attempt", _raising("span batcher's flush")),
        "role_hook": (agent_spans, "call_starts", _raising("role hook")),
    }
    return targets[place]


INSTRUMENTATION_FAULTS = (
    "tracer",
    "processor.on_start",
    "processor.on_end",
    "batcher.submit",
    "batcher.write",
    "batcher.flush",
    "role_hook",
    "reward_emission",
)
"""The places of relight's instrumentation :func:`break_instrumentation` can break."""

_broken: dict[str, tuple[object, str, Any]] = {}


def break_instrumentation(place: str) -> None:
    """Make ``place`` (one of :data:`INSTRUMENTATION_FAULTS`) raise :class:`InstrumentationFault` in this
    process, from now until :func:`mend_instrumentation`; breaking it again does nothing."""
    if place in _broken:
        return
    target, attribute, replacement = _fault_target(place)
    _broken[place] = (target, attribute, getattr(target, attribute))
    setattr(target, attribute, replacement)


def mend_instrumentation() -> None:
    """Undo every :func:`break_instrumentation` of this process."""
    while _broken:
        _place, (target, attribute, original) = _broken.popitem()
        setattr(target, attribute, original)
