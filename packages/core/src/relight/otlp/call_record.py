"""An imported LLM call as relight records it: its text derived from the tracer's dialect, and the GenAI events
logged for it joined in.

An LLM call, in whichever dialect (:mod:`relight.otlp.dialects`), gets what relight's gateway would have
recorded (:func:`derive_call`): ``relight.span.kind = llm``, the call's messages as OpenAI chat messages in
``gen_ai.input.messages``/``gen_ai.output.messages`` and its tools in OpenAI's function shape in
``gen_ai.tool.definitions`` (the importer keeps an original value that differs under
``relight.original.<name>``), and ``relight.import.missing`` lists what the trace could not say:
``token_ids``, ``logprobs`` and ``policy_version`` always (nothing outside relight records them), the
messages, their text (``relight.import.missing_text`` says which, ``relight.import.missing_text.cause`` why)
or the response id when absent.

GenAI events sent as OTLP log records are stored as spans of their own under the span they were emitted in
(:data:`LOG_EVENT` names the event, :data:`LOG_BODY` holds its body). When a call is read, the events logged
for it (:func:`log_event`) fill in the messages its span lacks (:func:`with_log_events`), whichever arrived
first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import cast

from pydantic import JsonValue

from relight import semconv
from relight.otlp.dialects import HIDDEN, CallText, SpanEvent, call_text
from relight.records import Span, SpanKind

__all__ = [
    "EVENTS",
    "LOG_BODY",
    "LOG_EVENT",
    "ORIGINAL",
    "RESOURCE",
    "SCOPE",
    "derive_call",
    "log_event",
    "with_log_events",
]

MISSING = semconv.IMPORT_MISSING
DIALECT = semconv.IMPORT_DIALECT
RESOURCE = "relight.otlp.resource"
"""On an imported span: the attributes of the resource that sent it."""
SCOPE = "relight.otlp.scope"
"""On an imported span: its instrumentation scope."""
EVENTS = "relight.otlp.events"
"""On an imported span: its span events."""
LOG_EVENT = "relight.otlp.log.event"
"""On a span holding a log record: the record's event name."""
LOG_BODY = "relight.otlp.log.body"
"""On a span holding a log record: the record's body, as plain JSON."""
ORIGINAL = "relight.original."
"""Prefix of an imported span's original value of an attribute relight derived anew."""
_MESSAGE_KEYS = ("input_messages", "output_messages", "message_text")


def log_event(span: Span) -> SpanEvent | None:
    """The GenAI event a stored log record holds, as a span event (its body's fields beside its attributes)."""
    name = span.attributes.get(LOG_EVENT)
    if not isinstance(name, str):
        return None
    attributes = {k: v for k, v in span.attributes.items() if k not in (LOG_EVENT, LOG_BODY, RESOURCE, SCOPE)}
    body = span.attributes.get(LOG_BODY)
    if isinstance(body, dict):
        attributes.update(body)
    elif body is not None:
        attributes["content"] = body
    return SpanEvent(name, span.start_time, attributes)


def derive_call(
    attributes: Mapping[str, JsonValue], events: Sequence[SpanEvent], span_id: str, *, log_events: int = 0
) -> dict[str, JsonValue]:
    """What relight records for an LLM call, read from a foreign span's attributes and events (``log_events`` of
    them arrived as log records): its kind, messages, tools, usage, response id, and what the trace lacks."""
    text = call_text(attributes, events)
    missing = ["token_ids", "logprobs", "policy_version"]
    derived: dict[str, JsonValue] = {
        semconv.SPAN_KIND: SpanKind.LLM.value,
        semconv.GEN_AI_OPERATION_NAME: str(attributes.get(semconv.GEN_AI_OPERATION_NAME) or "chat"),
        DIALECT: text.dialect,
    }
    derived |= _messages(text, missing, log_events)
    if text.input_tokens is not None:
        derived[semconv.GEN_AI_USAGE_INPUT_TOKENS] = text.input_tokens
    if text.output_tokens is not None:
        derived[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = text.output_tokens
    if text.response_id:
        derived[semconv.GEN_AI_RESPONSE_ID] = text.response_id
    else:  # transitions join a call's role by response id: give every call one, and say it is made up
        derived[semconv.GEN_AI_RESPONSE_ID] = f"otlp-{span_id}"
        missing.append("response_id")
    derived[MISSING] = list[JsonValue](missing)
    if text.model and semconv.GEN_AI_REQUEST_MODEL not in attributes:
        derived[semconv.GEN_AI_REQUEST_MODEL] = text.model
    return derived


def with_log_events(span: Span, events: Sequence[SpanEvent]) -> Span:
    """A stored LLM span with the GenAI events logged for it read in: the messages they hold, when the span
    holds none of its own, and what is still missing, with why."""
    missing = span.attributes.get(MISSING)
    listed = [str(m) for m in cast(list[JsonValue], missing)] if isinstance(missing, list) else []
    if "input_messages" not in listed and "output_messages" not in listed:
        return span
    own = [
        SpanEvent(str(event.get("name")), _integer(event.get("time")), _mapping(event.get("attributes")))
        for event in _stored_events(span)
    ]
    text = call_text({k: v for k, v in span.attributes.items() if not k.startswith(ORIGINAL)}, [*own, *events])
    attributes = {
        k: v
        for k, v in span.attributes.items()
        if k not in (semconv.IMPORT_MISSING_TEXT, semconv.IMPORT_MISSING_TEXT_CAUSE)
    }
    attributes |= _messages(text, [], len(events))
    attributes[MISSING] = list[JsonValue](
        [m for m in listed if m not in (*_MESSAGE_KEYS, "response_id")]
        + _missing_of(text)
        + (["response_id"] if "response_id" in listed else [])
    )
    return span.model_copy(update={"attributes": attributes})


def _stored_events(span: Span) -> list[dict[str, JsonValue]]:
    events = span.attributes.get(EVENTS)
    if not isinstance(events, list):
        return []
    return [cast(dict[str, JsonValue], e) for e in cast(list[JsonValue], events) if isinstance(e, dict)]


def _integer(value: JsonValue | None) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _mapping(value: JsonValue | None) -> dict[str, JsonValue]:
    return cast(dict[str, JsonValue], value) if isinstance(value, dict) else {}


def _missing_of(text: CallText) -> list[str]:
    return [
        key
        for key, absent in (
            ("input_messages", not text.input_messages),
            ("output_messages", not text.output_messages),
            ("message_text", bool(text.missing_text)),
        )
        if absent
    ]


def _messages(text: CallText, missing: list[str], log_events: int) -> dict[str, JsonValue]:
    """The call's messages and tools as relight records them; ``missing`` gets what the trace lacks."""
    derived: dict[str, JsonValue] = {}
    if text.input_messages:
        derived[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(text.input_messages)
    if text.output_messages:
        derived[semconv.GEN_AI_OUTPUT_MESSAGES] = json.dumps(text.output_messages[:1])
    if text.tools:
        derived[semconv.GEN_AI_TOOL_DEFINITIONS] = json.dumps(text.tools)
    if text.finish_reasons:
        derived[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = list[JsonValue](text.finish_reasons)
    missing += _missing_of(text)
    if text.missing_text:
        derived[semconv.IMPORT_MISSING_TEXT] = list[JsonValue](text.missing_text)
    cause = _cause(text, log_events)
    if cause is not None:
        derived[semconv.IMPORT_MISSING_TEXT_CAUSE] = cause
    return derived


def _cause(text: CallText, log_events: int) -> str | None:
    """Why the call's text is missing, as far as the trace tells."""
    if not text.input_messages and not text.output_messages:
        if log_events:
            return "the GenAI events received for this call hold no messages"
        return (
            "its tracer's content capture is off "
            "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, TRACELOOP_TRACE_CONTENT, OPENINFERENCE_HIDE_*), "
            "or it sends messages as OTLP log events and none reached this receiver's /v1/logs "
            "(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)"
        )
    if not text.input_messages or not text.output_messages:
        return "its tracer recorded only part of the call"
    if not text.missing_text:
        return None
    if all(entry.endswith(HIDDEN) for entry in text.missing_text):
        return "its tracer hid the text (OpenInference's OPENINFERENCE_HIDE_* settings)"
    return (
        "its tracer recorded these messages without their text: content capture is off "
        "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, TRACELOOP_TRACE_CONTENT, OPENINFERENCE_HIDE_*)"
    )
