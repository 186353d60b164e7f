"""The OTLP/HTTP receiver: ``/v1/traces``, ``/v1/logs`` and ``/v1/metrics``, protobuf or JSON, as OTLP defines them.

Point any OpenTelemetry exporter at it (``OTEL_EXPORTER_OTLP_ENDPOINT=http://host:4318``) and the GenAI
spans it sends become rollouts in a store (see :mod:`relight.otlp.importer`); the GenAI events a tracer
sends as log records join the calls they belong to; metrics are answered and counted, never kept
(relight trains on traces), so exporters that send them stay quiet.

Answers follow the specification: 200 with an ``Export…ServiceResponse`` in the request's encoding,
whose ``partial_success`` names what was not stored and why (a log record that is no GenAI event, or
tied to no span); 400 with a ``google.rpc.Status`` naming what is wrong in the body; 413 for a body
over ``max_body_bytes`` (checked on the declared length, while reading, and after decompression); 415
for an unknown content type; 401 without the bearer token when one is set; 409 when a trace's rollout
id is taken by a rollout the importer did not make (:class:`relight.otlp.importer.TraceConflictError`);
503 when the store is unavailable, which exporters retry. A request is decoded and checked whole before
the store is touched, so a bad one leaves nothing behind. ``GET /stats`` tells what was stored, refused
and counted since the receiver started. The store may be one runners share: imported rollouts are
recorded beside its queue, never claimed from it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relight._internal.server import AsgiServer
from relight.errors import RelightError, StoreUnavailableError
from relight.otlp.decode import (
    OtlpBodyError,
    OtlpBodyTooLargeError,
    count_metric_points,
    decode_logs,
    decode_traces,
    require_proto,
)
from relight.otlp.importer import ImportOptions, ImportResult, ImportStats, TraceConflictError, TraceImporter
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
) -> Starlette:
    """The ASGI app receiving traces into ``store``; with a ``token``, requests need ``Authorization: Bearer <token>``
    (exporters send it from ``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>``).

    Raises:
        ImportError: ``opentelemetry-proto`` is missing (``pip install 'relight[otlp]'``).
    """
    trace_service = require_proto()
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2  # pyright: ignore[reportMissingTypeStubs]
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # pyright: ignore[reportMissingTypeStubs]

    importer = TraceImporter(store, options)

    async def traces(request: Request) -> Response:
        async def handle(body: bytes, content_type: str, encoding: str | None) -> Any:
            spans = decode_traces(body, content_type=content_type, content_encoding=encoding, max_bytes=max_body_bytes)
            result = await importer.add(spans)
            answer = trace_service.ExportTraceServiceResponse()
            if result.refused:
                answer.partial_success.rejected_spans = len(result.refused)
                answer.partial_success.error_message = result.summary()
            return answer

        return await _receive(request, handle, importer.stats, token=token, max_body_bytes=max_body_bytes)

    async def logs(request: Request) -> Response:
        async def handle(body: bytes, content_type: str, encoding: str | None) -> Any:
            records = decode_logs(body, content_type=content_type, content_encoding=encoding, max_bytes=max_body_bytes)
            result: ImportResult = await importer.add_logs(records)
            answer = logs_service_pb2.ExportLogsServiceResponse()
            if result.refused:
                answer.partial_success.rejected_log_records = len(result.refused)
                answer.partial_success.error_message = result.summary()
            return answer

        return await _receive(request, handle, importer.stats, token=token, max_body_bytes=max_body_bytes)

    async def metrics(request: Request) -> Response:
        async def handle(body: bytes, content_type: str, encoding: str | None) -> Any:
            points = count_metric_points(
                body, content_type=content_type, content_encoding=encoding, max_bytes=max_body_bytes
            )
            importer.stats.metric_points += points
            return metrics_service_pb2.ExportMetricsServiceResponse()

        return await _receive(request, handle, importer.stats, token=token, max_body_bytes=max_body_bytes)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(importer.stats.as_json())

    # Plain Starlette, as the gateway: each route reads its body itself (protobuf or JSON, as OTLP defines them).
    app = Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/v1/logs", logs, methods=["POST"]),
            Route("/v1/metrics", metrics, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
        ]
    )
    app.state.importer = importer
    return app


async def _receive(
    request: Request,
    handle: Callable[[bytes, str, str | None], Awaitable[Any]],
    stats: ImportStats,
    *,
    token: str | None,
    max_body_bytes: int,
) -> Response:
    """Check, read and hand one export to ``handle``; its answer (a protobuf message) in the request's encoding.

    A refused export is logged and counted (``stats.refused_exports``, by status) as well as answered.
    """
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if token is not None and not hmac.compare_digest(
        request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()
    ):
        return _refused(stats, request, 401, _UNAUTHENTICATED, "missing or wrong bearer token", media)
    if media not in {_PROTOBUF, _JSON}:
        message = f"Content-Type {content_type!r} is not {_PROTOBUF} or {_JSON}"
        return _refused(stats, request, 415, _INVALID_ARGUMENT, message, _JSON)
    try:
        body = await _read_body(request, max_body_bytes)
        answer = await handle(body, content_type, request.headers.get("content-encoding"))
    except OtlpBodyTooLargeError as error:
        return _refused(stats, request, 413, _RESOURCE_EXHAUSTED, str(error), media)
    except OtlpBodyError as error:
        return _refused(stats, request, 400, _INVALID_ARGUMENT, str(error), media)
    except TraceConflictError as error:
        return _refused(stats, request, 409, _ALREADY_EXISTS, str(error), media)
    except StoreUnavailableError as error:
        return _refused(stats, request, 503, _UNAVAILABLE, f"the store is unavailable: {error}", media)
    except RelightError as error:
        logger.exception("relight: storing an OTLP export failed")
        return _refused(stats, request, 500, _INTERNAL, f"storing the export failed: {error}", media)
    return _message(200, answer, media)


def _refused(stats: ImportStats, request: Request, status: int, code: int, message: str, media: str) -> Response:
    stats.refused_exports[str(status)] += 1
    logger.warning("relight: OTLP export to %s refused with %d: %s", request.url.path, status, message)
    return _status(status, code, message, media)


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
    app = create_otlp_app(store, options, max_body_bytes=max_body_bytes, token=token)
    server = AsgiServer(app, host=host, port=port)
    await server.start()
    try:
        if on_ready is not None:
            on_ready(f"{server.url}/v1/traces")
        await asyncio.Event().wait()
    finally:
        await server.stop()
        await store.close()
        importer: TraceImporter = app.state.importer
        logger.info("relight: the OTLP receiver stopped; it stored %s", json.dumps(importer.stats.as_json()))
