"""The gateway's upstream HTTP client against real servers: the scripted vLLM-style one, behind a real proxy
that drops connections, and raw TCP servers that misbehave (never answer, answer garbage, cut a body short)."""

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from relight._internal.http import HttpClient
from relight.gateway import OpenAIUpstream, UpstreamError
from relight.scripted import ScriptedUpstream
from relight_testing.faults import DroppingProxy

CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello"}]}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handle: Handler) -> AsyncGenerator[str]:
    """A TCP server on loopback that answers as ``handle`` says; yields its base URL."""
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handle(reader, writer)
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    return head + await reader.readexactly(length)


async def test_calls_reuse_one_keep_alive_connection() -> None:
    async with ScriptedUpstream() as scripted, DroppingProxy(scripted.url) as proxy:
        upstream = OpenAIUpstream(f"{proxy.url}/v1")
        try:
            for _ in range(3):
                answer = await upstream.complete("chat", CHAT)
                assert answer["choices"][0]["message"]["content"] == "hello"
                assert answer["choices"][0]["token_ids"] == [ord(c) for c in "hello"]
            assert await upstream.models() == ["scripted"]
        finally:
            await upstream.aclose()
    assert proxy.requests["/v1/chat/completions"] == 3
    assert proxy.connections == 1


async def test_a_stream_arrives_whole_and_its_connection_is_reused() -> None:
    async with ScriptedUpstream(chunk_chars=1) as scripted:
        client = HttpClient(scripted.base_url)
        upstream = OpenAIUpstream(scripted.base_url)
        upstream._http = client  # pyright: ignore[reportPrivateUsage]  (to look at its pool)
        try:
            for _ in range(2):
                chunks = [chunk async for chunk in upstream.stream("chat", {**CHAT, "stream": True})]
                text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
                assert text == "hello"
                assert chunks[-1]["usage"]["completion_tokens"] == len("hello")
                assert len(client._idle) == 1  # pyright: ignore[reportPrivateUsage]
        finally:
            await upstream.aclose()


async def test_a_dropped_connection_is_an_upstream_error_and_the_next_call_gets_a_fresh_one() -> None:
    async with ScriptedUpstream() as scripted, DroppingProxy(scripted.url) as proxy:
        upstream = OpenAIUpstream(f"{proxy.url}/v1")
        try:
            await upstream.complete("chat", CHAT)
            proxy.drop("/v1/chat/completions", when="before")
            with pytest.raises(UpstreamError, match="did not answer: ConnectionError"):
                await upstream.complete("chat", CHAT)
            proxy.drop("/v1/chat/completions", when="after")
            with pytest.raises(UpstreamError, match="did not answer: ConnectionError"):
                await upstream.complete("chat", CHAT)
            assert (await upstream.complete("chat", CHAT))["choices"][0]["message"]["content"] == "hello"
        finally:
            await upstream.aclose()
    assert proxy.connections == 3


async def test_an_idle_connection_is_given_up_after_the_keep_alive() -> None:
    async with ScriptedUpstream() as scripted, DroppingProxy(scripted.url) as proxy:
        client = HttpClient(f"{proxy.url}/v1", keep_alive=0.2)
        try:
            assert (await (await client.request("GET", "/models")).read()).startswith(b"{")
            time.sleep(0.3)  # noqa: ASYNC251  (the keep-alive running out is the point)
            assert (await (await client.request("GET", "/models")).read()).startswith(b"{")
        finally:
            await client.aclose()
    assert proxy.connections == 2


async def test_an_upstream_that_never_answers_times_out() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client gives up

    async with raw_server(hang) as url:
        upstream = OpenAIUpstream(url, timeout=0.3)
        try:
            with pytest.raises(UpstreamError, match=r"did not answer: TimeoutError: no answer within 0\.3 s"):
                await upstream.complete("chat", CHAT)
        finally:
            await upstream.aclose()


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (b"this is not HTTP\r\n\r\n", "malformed HTTP response"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choices":', "the server closed the connection"),
    ],
)
async def test_a_malformed_or_cut_answer_is_an_upstream_error(reply: bytes, reason: str) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with raw_server(answer) as url:
        upstream = OpenAIUpstream(url)
        try:
            with pytest.raises(UpstreamError, match=reason):
                await upstream.complete("chat", CHAT)
        finally:
            await upstream.aclose()


async def test_a_body_without_a_length_ends_with_the_connection_and_a_large_stream_arrives_whole() -> None:
    payload = b"x" * (3 * 2**20)  # well over what is read ahead of a slow reader

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + payload)
        await writer.drain()

    async with raw_server(answer) as url:
        client = HttpClient(url)
        try:
            response = await client.request("POST", "/chat/completions", b"{}")
            received = bytearray()
            async for part in response.iter_body():
                received += part
                await asyncio.sleep(0)  # a reader slower than the socket
            assert bytes(received) == payload
        finally:
            await client.aclose()
