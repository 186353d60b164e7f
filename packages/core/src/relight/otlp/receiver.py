"""The OTLP/HTTP trace receiver: ``POST /v1/traces`` in protobuf or JSON, as the OTLP specification defines.

Point any OpenTelemetry exporter at it (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://host:4318/v1/traces``)
and the GenAI spans it sends become rollouts in a store (see :mod:`relight.otlp.importer`).

Answers follow the specification: 200 with an ``ExportTraceServiceResponse`` in the request's
encoding (its ``partial_success`` counting spans of traces that held no LLM call); 400 with a
``google.rpc.Status`` naming what is wrong in the body; 413 for a body over ``max_body_bytes``
(checked on the declared length, while reading, and after decompression); 415 for an unknown
content type; 401 without the bearer token when one is set; 409 when a trace's rollout id is taken
by a rollout the importer did not make (:class:`relight.otlp.importer.TraceConflictError`); 503 when
the store is unavailable, which exporters retry. A request is decoded and checked whole before the
store is touched, so a bad one leaves nothing behind. The store may be one runners share: imported
rollouts are recorded beside its queue, never claimed from it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from relight._internal.server import AsgiServer
from relight.errors import RelightError, StoreUnavailableError
from relight.otlp.decode import OtlpBodyError, OtlpBodyTooLargeError, decode_traces, require_proto
from relight.otlp.importer import ImportOptions, TraceConflictError, TraceImporter
from relight.store import Store

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_PORT", "create_otlp_app", "serve_otlp"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 4318
"""OTLP/HTTP's registered port."""
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
# google.rpc.Code values
_INVALID_ARGUMENT, _ALREADY_EXISTS, _RESOURCE_EXHAUSTED, _INTERNAL, _UNAVAILABLE, _UNAUTHENTICATED = (
    3,
    6,
    8,
    13,
    14,
    16,
)


def create_otlp_app(
    store: Store,
    options: ImportOptions | None = None,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    token: str | None = None,
) -> FastAPI:
    """The ASGI app receiving traces into ``store``; with a ``token``, requests need ``Authorization: Bearer <token>``
    (exporters send it from ``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>``).

    Raises:
        ImportError: ``opentelemetry-proto`` is missing (``pip install 'relight[otlp]'``).
    """
    service = require_proto()
    importer = TraceImporter(store, options)
    app = FastAPI(title="relight OTLP receiver", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        content_type = request.headers.get("content-type", "")
        media = content_type.split(";", 1)[0].strip().lower()
        if token is not None and not hmac.compare_digest(
            request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()
        ):
            return _status(401, _UNAUTHENTICATED, "missing or wrong bearer token", media)
        if media not in {_PROTOBUF, _JSON}:
            return _status(
                415, _INVALID_ARGUMENT, f"Content-Type {content_type!r} is not {_PROTOBUF} or {_JSON}", _JSON
            )
        try:
            body = await _read_body(request, max_body_bytes)
            spans = decode_traces(
                body,
                content_type=content_type,
                content_encoding=request.headers.get("content-encoding"),
                max_bytes=max_body_bytes,
            )
            result = await importer.add(spans)
        except OtlpBodyTooLargeError as error:
            return _status(413, _RESOURCE_EXHAUSTED, str(error), media)
        except OtlpBodyError as error:
            return _status(400, _INVALID_ARGUMENT, str(error), media)
        except TraceConflictError as error:
            return _status(409, _ALREADY_EXISTS, str(error), media)
        except StoreUnavailableError as error:
            return _status(503, _UNAVAILABLE, f"the store is unavailable: {error}", media)
        except RelightError as error:
            logger.exception("relight: storing traces failed")
            return _status(500, _INTERNAL, f"storing the traces failed: {error}", media)
        answer = service.ExportTraceServiceResponse()
        if result.rejected_spans:
            answer.partial_success.rejected_spans = result.rejected_spans
            answer.partial_success.error_message = (
                f"{result.rejected_spans} span(s) belong to traces with no LLM call and were not stored"
            )
        return _message(200, answer, media)

    return app


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise OtlpBodyTooLargeError(f"the body is {declared} bytes; this receiver accepts at most {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise OtlpBodyTooLargeError(f"the body is over {limit} bytes, this receiver's limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _message(status: int, message: Any, media: str) -> Response:
    if media == _JSON:
        from google.protobuf import json_format

        return Response(json_format.MessageToJson(message, indent=None), status, media_type=_JSON)
    return Response(message.SerializeToString(), status, media_type=_PROTOBUF)


def _status(http_status: int, code: int, message: str, media: str) -> Response:
    """A ``google.rpc.Status`` body, as OTLP answers failures, in the request's encoding."""
    if media == _PROTOBUF:  # (any other media, 415's included, is answered in JSON)
        try:
            from google.rpc import status_pb2  # pyright: ignore[reportMissingTypeStubs]
        except ImportError:  # googleapis-common-protos comes with the otlp extra; without it, say it in JSON
            media = _JSON
        else:
            return _message(http_status, status_pb2.Status(code=code, message=message), media)
    return Response(json.dumps({"code": code, "message": message}), http_status, media_type=_JSON)


async def serve_otlp(
    store: Store,
    options: ImportOptions | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the receiver until the task is cancelled (Ctrl-C); ``on_ready`` gets the endpoint once listening."""
    server = AsgiServer(
        create_otlp_app(store, options, max_body_bytes=max_body_bytes, token=token), host=host, port=port
    )
    await server.start()
    try:
        if on_ready is not None:
            on_ready(f"{server.url}/v1/traces")
        await asyncio.Event().wait()
    finally:
        await server.stop()
        await store.close()
