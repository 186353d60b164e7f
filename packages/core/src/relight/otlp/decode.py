"""OTLP/HTTP bodies (traces, logs, metrics), protobuf or JSON, read with the official protobuf types.

Decoding goes through ``opentelemetry-proto`` (the ``relight[otlp]`` extra), so relight reads exactly
what the specification's schema says. OTLP's JSON differs from protobuf's stock JSON mapping in one
way that matters here: trace and span ids are hex, not base64; they are translated before parsing.
Everything is checked before anything is returned, so a body is taken whole or refused whole.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from pydantic import JsonValue

from relight.otlp.dialects import SpanEvent

__all__ = [
    "ForeignLog",
    "ForeignSpan",
    "OtlpBodyError",
    "OtlpBodyTooLargeError",
    "count_metric_points",
    "decode_logs",
    "decode_traces",
    "require_proto",
]

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


class OtlpBodyError(ValueError):
    """The body is not an OTLP export; the message names what is wrong and where."""


class OtlpBodyTooLargeError(OtlpBodyError):
    """The body, once decompressed, is larger than the receiver accepts."""


@dataclass(frozen=True, slots=True)
class ForeignSpan:
    """One span as an exporter sent it: ids in hex, attributes as plain JSON."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_time: int
    end_time: int
    attributes: dict[str, JsonValue]
    events: list[SpanEvent] = field(default_factory=list[SpanEvent])
    status_code: str = "UNSET"
    status_message: str | None = None
    resource: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])
    scope: str = ""


@dataclass(frozen=True, slots=True)
class ForeignLog:
    """One log record as an exporter sent it: an event (``event_name``, or the older ``event.name`` attribute)
    tied to the span it was emitted in, when it was."""

    where: str
    """Its place in the request (``resourceLogs[0].scopeLogs[0].logRecords[2]``), to name it in a refusal."""
    trace_id: str | None
    span_id: str | None
    event_name: str
    time: int
    attributes: dict[str, JsonValue]
    body: JsonValue = None
    severity: str = ""
    resource: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])
    scope: str = ""


def require_proto() -> Any:
    """The OTLP trace service module, or an ImportError that says what to install."""
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as error:
        raise ImportError("relight's OTLP receiver needs opentelemetry-proto: pip install 'relight[otlp]'") from error
    return trace_service_pb2


def decode_traces(
    body: bytes, *, content_type: str, content_encoding: str | None = None, max_bytes: int
) -> list[ForeignSpan]:
    """The spans of one ``ExportTraceServiceRequest``.

    Raises:
        OtlpBodyTooLargeError: the body inflates beyond ``max_bytes``.
        OtlpBodyError: an unknown content type or encoding, a body that does not parse, or a span
            whose ids or times are invalid.
    """
    request = require_proto().ExportTraceServiceRequest()
    _decode(body, content_type, content_encoding, max_bytes, request, ("resourceSpans", "scopeSpans", "spans"))
    return _spans(request)


def decode_logs(
    body: bytes, *, content_type: str, content_encoding: str | None = None, max_bytes: int
) -> list[ForeignLog]:
    """The log records of one ``ExportLogsServiceRequest``.

    Raises:
        OtlpBodyTooLargeError: the body inflates beyond ``max_bytes``.
        OtlpBodyError: an unknown content type or encoding, a body that does not parse, or invalid ids.
    """
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2  # pyright: ignore[reportMissingTypeStubs]

    request = logs_service_pb2.ExportLogsServiceRequest()
    _decode(body, content_type, content_encoding, max_bytes, request, ("resourceLogs", "scopeLogs", "logRecords"))
    return _logs(request)


def count_metric_points(body: bytes, *, content_type: str, content_encoding: str | None = None, max_bytes: int) -> int:
    """How many data points one ``ExportMetricsServiceRequest`` holds (relight keeps none; it counts them).

    Raises:
        OtlpBodyTooLargeError: the body inflates beyond ``max_bytes``.
        OtlpBodyError: an unknown content type or encoding, or a body that does not parse.
    """
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # pyright: ignore[reportMissingTypeStubs]

    request = metrics_service_pb2.ExportMetricsServiceRequest()
    _decode(body, content_type, content_encoding, max_bytes, request, ("resourceMetrics", "scopeMetrics", "metrics"))
    points = 0
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    points += len(getattr(metric, kind).data_points)
    return points


def _decode(
    body: bytes,
    content_type: str,
    content_encoding: str | None,
    max_bytes: int,
    request: Any,
    levels: tuple[str, str, str],
) -> None:
    raw = _inflate(body, content_encoding, max_bytes)
    media = content_type.split(";", 1)[0].strip().lower()
    kind = type(request).__name__
    if media == _PROTOBUF:
        from google.protobuf.message import DecodeError

        try:
            request.ParseFromString(raw)
        except DecodeError as error:
            raise OtlpBodyError(f"the body is not a protobuf {kind}: {error}") from None
    elif media == _JSON:
        _parse_json(raw, request, levels)
    else:
        raise OtlpBodyError(
            f"Content-Type {content_type!r} is not an OTLP encoding; send application/x-protobuf or application/json"
        )


def _inflate(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in {"gzip", "deflate"}:
        raise OtlpBodyError(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        raw = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise OtlpBodyError(f"the body is not valid {encoding}: {error}") from None
    if len(raw) > max_bytes:
        raise OtlpBodyTooLargeError(f"the body inflates to more than {max_bytes} bytes, the receiver's limit")
    if not inflater.eof:
        raise OtlpBodyError(f"the {encoding} body is cut short")
    return raw


def _parse_json(raw: bytes, request: Any, levels: tuple[str, str, str]) -> None:
    from google.protobuf import json_format

    kind = type(request).__name__
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise OtlpBodyError(f"the body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise OtlpBodyError(f"the JSON body must be an object with {levels[0]}")
    _hex_ids_to_base64(cast(dict[str, Any], document), levels)
    try:
        json_format.ParseDict(cast(dict[str, Any], document), request, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise OtlpBodyError(f"the JSON body is not an {kind}: {error}") from None


def _hex_ids_to_base64(document: dict[str, Any], levels: tuple[str, str, str]) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON parser reads bytes as base64."""
    outer, middle, inner = levels
    for r, resources in enumerate(_list(document, outer, _snake(outer))):
        for s, scopes in enumerate(_list(resources, middle, _snake(middle))):
            for n, item in enumerate(_list(scopes, inner, _snake(inner))):
                where = f"{outer}[{r}].{middle}[{s}].{inner}[{n}]"
                for key in ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"):
                    if key in item and item[key] != "":
                        item[key] = _hex_to_base64(item[key], f"{where}.{key}")
                for number, link in enumerate(_list(item, "links")):
                    for key in ("traceId", "trace_id", "spanId", "span_id"):
                        if key in link:
                            link[key] = _hex_to_base64(link[key], f"{where}.links[{number}].{key}")


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _list(container: Any, *keys: str) -> list[dict[str, Any]]:
    if not isinstance(container, dict):
        return []
    for key in keys:
        value = cast(dict[str, Any], container).get(key)
        if isinstance(value, list):
            return [cast(dict[str, Any], v) for v in cast(list[Any], value) if isinstance(v, dict)]
    return []


def _hex_to_base64(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise OtlpBodyError(f"{where} must be a hex string, got {value!r}")
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise OtlpBodyError(f"{where} must be hex, got {value!r}") from None


def _logs(request: Any) -> list[ForeignLog]:
    records: list[ForeignLog] = []
    for r, resource_logs in enumerate(request.resource_logs):
        resource = _attributes(resource_logs.resource.attributes)
        for s, scope_logs in enumerate(resource_logs.scope_logs):
            scope = str(scope_logs.scope.name)
            for n, record in enumerate(scope_logs.log_records):
                where = f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]"
                attributes = _attributes(record.attributes)
                trace, span = bytes(record.trace_id), bytes(record.span_id)
                named = attributes.get("event.name")
                records.append(
                    ForeignLog(
                        where=where,
                        trace_id=_id(trace, 16, f"{where}.traceId") if trace else None,
                        span_id=_id(span, 8, f"{where}.spanId") if span else None,
                        event_name=str(record.event_name) or (named if isinstance(named, str) else ""),
                        time=int(record.time_unix_nano) or int(record.observed_time_unix_nano),
                        attributes=attributes,
                        body=_value(record.body) if record.HasField("body") else None,
                        severity=str(record.severity_text),
                        resource=resource,
                        scope=scope,
                    )
                )
    return records


def _spans(request: Any) -> list[ForeignSpan]:
    spans: list[ForeignSpan] = []
    for r, resource_spans in enumerate(request.resource_spans):
        resource = _attributes(resource_spans.resource.attributes)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            scope = str(scope_spans.scope.name)
            for n, span in enumerate(scope_spans.spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                spans.append(_span(span, where, resource, scope))
    return spans


def _span(span: Any, where: str, resource: dict[str, JsonValue], scope: str) -> ForeignSpan:
    trace_id = _id(span.trace_id, 16, f"{where}.traceId")
    span_id = _id(span.span_id, 8, f"{where}.spanId")
    parent = bytes(span.parent_span_id)
    start, end = int(span.start_time_unix_nano), int(span.end_time_unix_nano)
    if end < start:
        raise OtlpBodyError(f"{where} (span {span_id}) ends ({end}) before it starts ({start})")
    events = [
        SpanEvent(str(event.name), int(event.time_unix_nano), _attributes(event.attributes)) for event in span.events
    ]
    return ForeignSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=_id(parent, 8, f"{where}.parentSpanId") if parent else None,
        name=str(span.name),
        start_time=start,
        end_time=end,
        attributes=_attributes(span.attributes),
        events=events,
        status_code=_STATUS.get(int(span.status.code), "UNSET"),
        status_message=str(span.status.message) or None,
        resource=resource,
        scope=scope,
    )


def _id(value: bytes, size: int, where: str) -> str:
    if len(value) != size or not any(value):
        raise OtlpBodyError(f"{where} must be {size} bytes and not all zero, got {len(value)} byte(s)")
    return value.hex()


def _attributes(pairs: Any) -> dict[str, JsonValue]:
    return {str(pair.key): _value(pair.value) for pair in pairs}


def _value(value: Any) -> JsonValue:
    """An OTLP AnyValue as plain JSON: bytes become base64 text, key-value lists objects."""
    kind = value.WhichOneof("value")
    readers: dict[str | None, Callable[[Any], JsonValue]] = {
        "string_value": lambda v: str(v.string_value),
        "bool_value": lambda v: bool(v.bool_value),
        "int_value": lambda v: int(v.int_value),
        "double_value": lambda v: float(v.double_value),
        "array_value": lambda v: [_value(item) for item in v.array_value.values],
        "kvlist_value": lambda v: {str(p.key): _value(p.value) for p in v.kvlist_value.values},
        "bytes_value": lambda v: base64.b64encode(bytes(v.bytes_value)).decode(),
    }
    reader = readers.get(kind)
    return reader(value) if reader is not None else None
