"""Span JSON for the hot paths: orjson writes a span about three times faster than pydantic.

Spans are what stores write most (tens of thousands a second, ~2 KB each), and they are already
validated models, so writing them needs no validation, only encoding.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from relight.records import Span

__all__ = ["span_json", "spans_json"]


def span_json(span: Span, *, sequence_id: int | None = None) -> bytes:
    """``span`` as JSON, with ``sequence_id`` set when given; same values as ``model_dump_json``."""
    fields = span.__dict__ if sequence_id is None else {**span.__dict__, "sequence_id": sequence_id}
    try:
        return orjson.dumps(fields)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, which only pydantic writes
        if sequence_id is not None:
            span = span.model_copy(update={"sequence_id": sequence_id})
        return span.model_dump_json().encode()


def spans_json(spans: Iterable[Span]) -> bytes:
    """A JSON array of spans."""
    return b"[" + b",".join(span_json(span) for span in spans) + b"]"
