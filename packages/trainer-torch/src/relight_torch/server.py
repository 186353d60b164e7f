"""A :class:`~relight_torch.engine.torch_engine.TorchEngine` served alone as an OpenAI-compatible server.

``python -m relight_torch.server PATH_OR_tiny --port 8000`` answers ``/v1/chat/completions``
(whole and streamed), ``/v1/completions`` and ``/v1/models`` in the vLLM dialect (token ids and
logprobs included), so any OpenAI client can talk to a policy being developed, and relight's
gateway can use it as a remote replica. Requests are translated and answered by the core's
:class:`relight.gateway.EngineUpstream`, the same code that serves the engine in-process, so the
two paths cannot drift apart. There is no rollout scoping and nothing is recorded: that is the
gateway's job. Once it listens, it says the model name requests must give and the base URL.

A request without ``max_tokens`` gets a cap (``--max-tokens``; the model's generation config, else
1,024 tokens), and the first SIGTERM or Ctrl-C stops the server at once: the request being
generated is abandoned after the current step rather than waited for.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import socket
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any, cast

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from relight.gateway import EngineUpstream, UpstreamError
from relight.gateway.calls.validate import check_content_type, check_request
from relight.gateway.errors import GatewayError, error_body
from relight_torch.engine.torch_engine import DEFAULT_MAX_TOKENS, TorchEngine

__all__ = ["create_app", "main"]

_REQUIRED = {"chat": ("messages", list), "completions": ("prompt", str)}
_log = logging.getLogger("uvicorn.error")  # Uvicorn's logger: the line shows where "Uvicorn running on" does


def create_app(engine: TorchEngine) -> Starlette:
    """The ASGI app serving ``engine``."""
    upstream = EngineUpstream(engine, name=engine.name)

    async def chat(request: Request) -> Response:
        return await _serve(upstream, "chat", request)

    async def completions(request: Request) -> Response:
        return await _serve(upstream, "completions", request)

    async def models(request: Request) -> Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "relight"} for name in engine.models()]
        return JSONResponse({"object": "list", "data": data})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


async def _serve(upstream: EngineUpstream, endpoint: Any, request: Request) -> Response:
    try:
        check_content_type(request.headers.get("content-type"))
        body = json.loads(await request.body())
        field, kind = _REQUIRED[endpoint]
        if not isinstance(body, dict) or not isinstance(body.get(field), kind):
            return _error(400, f"the request must be a JSON object with {field!r} ({kind.__name__})")
        check_request(endpoint, cast(dict[str, Any], body))  # the gateway's own checks: one set of rules
    except ValueError as error:
        return _error(400, f"the request body is not valid JSON: {error}")
    except GatewayError as error:
        return _error(error.status_code, error.message, param=error.param)
    response_id = f"{'chatcmpl' if endpoint == 'chat' else 'cmpl'}-{secrets.token_hex(12)}"
    try:
        if not body.get("stream"):
            return JSONResponse({**await upstream.complete(endpoint, body), "id": response_id})
        chunks = upstream.stream(endpoint, body)
        first = await anext(chunks)
    except UpstreamError as error:  # a request the engine refused is a 4xx (404 for an unknown model), naming the field
        return _error(error.status_code or 502, error.message, param=error.param)

    async def events() -> AsyncIterator[bytes]:
        yield _event({**first, "id": response_id})
        async for chunk in chunks:
            yield _event({**chunk, "id": response_id})
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _error(status: int, message: str, *, param: str | None = None) -> Response:
    return JSONResponse(error_body(status, message, param=param), status_code=status)


def main(argv: list[str] | None = None) -> None:
    """Serve a model (a local Hugging Face directory, or ``tiny``) until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m relight_torch.server", description=main.__doc__)
    parser.add_argument("model", help="a local Hugging Face model directory, or 'tiny'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", help="the model name to answer to")
    parser.add_argument(
        "--force-first-tool-call",
        action="store_true",
        help="decode tool_choice auto as required until the messages hold a tool result "
        "(for a model that never picks a tool by itself; see TorchEngine)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="new tokens for a request that sets no max_tokens (default: the model's generation config, "
        f"else {DEFAULT_MAX_TOKENS}; 512 for tiny); 0 lifts the cap",
    )
    args = parser.parse_args(argv)
    options: dict[str, Any] = {"name": args.name} if args.name else {}
    if args.max_tokens is not None:
        options["default_max_tokens"] = args.max_tokens or None
    with _engine(args.model, **options) as engine:
        engine.force_first_tool_call = args.force_first_tool_call
        server = _Server(engine, uvicorn.Config(create_app(engine), host=args.host, port=args.port, log_level="info"))
        server.run()


def _engine(model: str, **options: Any) -> TorchEngine:
    """The engine for the command line's model: ``tiny`` (the built-in tiny model) or a local Hugging Face folder."""
    if model == "tiny":
        from relight_torch.models.tiny import tiny_engine

        return tiny_engine(**options)
    return TorchEngine.from_pretrained(model, **options)


class _Server(uvicorn.Server):
    """Stops on the first SIGTERM or SIGINT: the engine finishes the step it is sampling and fails what is in
    flight (:meth:`TorchEngine.abandon`), so no request that may never end holds the shutdown."""

    def __init__(self, engine: TorchEngine, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.engine = engine

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.engine.abandon()
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start, then say what a client needs: the model name to ask for and the base URL."""
        await super().startup(sockets)
        if self.started and self.servers and self.servers[0].sockets:
            host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
            port = self.servers[0].sockets[0].getsockname()[1]
            _log.info('Serving the model "%s" at http://%s:%d/v1', self.engine.name, host, port)


if __name__ == "__main__":
    main()
