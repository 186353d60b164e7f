"""OpenTelemetry into the store: the span processor, the tracer relight writes with, and emitters.

:func:`install` adds a :class:`StoreSpanProcessor` to the process's tracer provider (an SDK provider
is set as the global one if the application has none; an application's own SDK provider is kept
and shared). Every span that starts inside a rollout attempt (see :mod:`relight.tracing.context`) is
stamped with its rollout and attempt and, when it ends, handed to a :class:`SpanBatcher`.
Spans outside any attempt pass by untouched.

The processor is the process's one, and several runners may live in one process (a replay beside a
training run, tests, a notebook): each runner installs its own batcher and routes its attempts to it
(:func:`route_attempt`), so a span goes to the batcher of the runner whose attempt it belongs to, and a
runner that stops takes only its own batcher away. A span of an attempt no runner routes (one a
framework ends after its attempt was finished) goes to the batcher installed last.

Every hook here is guarded (:mod:`relight.tracing.hook_failures`): a failure costs a span, never the
application's request or the agent's rollout. Rewards take a path of their own to the store, without
the tracer or the processor (:mod:`relight.tracing.rewards`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import Tracer
from pydantic import JsonValue

from relight import semconv
from relight.records import Span, SpanKind
from relight.tracing.batcher import SpanBatcher
from relight.tracing.context import current_attempt
from relight.tracing.hook_failures import hook_failed
from relight.tracing.rewards import current_rewards, reward_span

__all__ = [
    "StoreSpanProcessor",
    "emit_annotation",
    "emit_reward",
    "install",
    "otel_to_span",
    "route_attempt",
    "tracer",
    "uninstall",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_processor: StoreSpanProcessor | None = None


class StoreSpanProcessor(SpanProcessor):
    """Stamps spans with the current attempt and sends the finished ones to the batcher of that attempt's runner."""

    def __init__(self) -> None:
        self.installed: list[SpanBatcher] = []
        """The batchers of the runners alive in this process, the latest last."""
        self.routes: dict[tuple[str, str], SpanBatcher] = {}
        """Each running attempt's batcher, by (rollout id, attempt id)."""
        self.dropped = 0

    @property
    def batcher(self) -> SpanBatcher | None:
        """The batcher installed last: where a span of an attempt no runner routes goes."""
        return self.installed[-1] if self.installed else None

    def batcher_for(self, rollout_id: str, attempt_id: str) -> SpanBatcher | None:
        """The batcher a span of this attempt goes to; None when no runner is alive in this process."""
        return self.routes.get((rollout_id, attempt_id)) or self.batcher

    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        if not self.installed:
            return
        try:
            ref = current_attempt()
            attributes = span.attributes or {}
            if ref is not None and semconv.ROLLOUT_ID not in attributes:
                span.set_attribute(semconv.ROLLOUT_ID, ref.rollout_id)
                span.set_attribute(semconv.ATTEMPT_ID, ref.attempt_id)
        except Exception:
            self.dropped += 1
            hook_failed("StoreSpanProcessor.on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if not self.installed:
            return
        try:
            converted = otel_to_span(span)
            if converted is not None:
                batcher = self.batcher_for(converted.rollout_id, converted.attempt_id)
                if batcher is not None:
                    batcher.submit(converted)
        except Exception:
            self.dropped += 1
            hook_failed("StoreSpanProcessor.on_end")

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def otel_to_span(span: ReadableSpan) -> Span | None:
    """Our record of an OpenTelemetry span, or None if it belongs to no attempt."""
    attributes = dict(span.attributes or {})
    rollout_id = attributes.get(semconv.ROLLOUT_ID)
    attempt_id = attributes.get(semconv.ATTEMPT_ID)
    if not isinstance(rollout_id, str) or not isinstance(attempt_id, str):
        return None
    context = span.get_span_context()
    if context is None:
        return None
    start = span.start_time or 0
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        span_id=format(context.span_id, "016x"),
        trace_id=format(context.trace_id, "032x"),
        parent_id=format(span.parent.span_id, "016x") if span.parent is not None else None,
        name=span.name,
        start_time=start,
        end_time=max(span.end_time or start, start),
        attributes={key: _json_value(value) for key, value in attributes.items()},
        status_code=span.status.status_code.name,
        status_message=span.status.description,
    )


def _json_value(value: Any) -> JsonValue:
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def install(batcher: SpanBatcher) -> StoreSpanProcessor:
    """Record spans of rollout attempts, sending those of attempts no runner routes to ``batcher`` (see the module)."""
    global _processor
    with _lock:
        if _processor is None:
            _processor = StoreSpanProcessor()
            _sdk_provider().add_span_processor(_processor)
        if batcher in _processor.installed:
            _processor.installed.remove(batcher)
        _processor.installed.append(batcher)
        return _processor


def uninstall(batcher: SpanBatcher | None = None) -> None:
    """Take ``batcher`` away (every batcher when None; nothing is recorded once none is left); spans already
    handed to it are still written.

    An SDK provider cannot drop a processor, so ours stays registered, recording nothing without a batcher.
    """
    with _lock:
        if _processor is None:
            return
        gone = list(_processor.installed) if batcher is None else [batcher]
        _processor.installed = [kept for kept in _processor.installed if kept not in gone]
        _processor.routes = {key: kept for key, kept in _processor.routes.items() if kept not in gone}


@contextmanager
def route_attempt(rollout_id: str, attempt_id: str, batcher: SpanBatcher) -> Generator[None]:
    """Send the spans of this attempt to ``batcher`` while the block runs (the runner's attempt, to its end)."""
    key = (rollout_id, attempt_id)
    with _lock:
        if _processor is not None:
            _processor.routes[key] = batcher
    try:
        yield
    finally:
        with _lock:
            if _processor is not None and _processor.routes.get(key) is batcher:
                del _processor.routes[key]


def _sdk_provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider
    own = TracerProvider()
    trace.set_tracer_provider(own)
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider
    logger.warning("relight: the global tracer provider is not an SDK provider; using a private one")
    return own


def tracer() -> Tracer:
    """The tracer relight and its adapters record with."""
    return _sdk_provider().get_tracer("relight")


def emit_reward(value: float, *, name: str = "reward", role: str | None = None) -> None:
    """Record a reward for the current attempt (the episode's, or a step's under ``per_step`` credit).

    With ``role``, the reward is that role's own (a checker rewarded for its verdict): credit assignment
    gives it to that role's calls only, whose credit then comes from such rewards alone, and it stays out
    of the episode's return (the rollout's reward, validation's mean), which remains the agent's outcome.

    The reward goes to the store by a path of its own, which no failing tracer, span processor or span
    batcher can cost it (:mod:`relight.tracing.rewards`); if even that fails, the attempt fails with
    the reason rather than succeed without its reward.

    Raises:
        ValueError: ``value`` is not a finite number, or ``role`` is an empty string.
    """
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"reward value must be a finite number, got {value!r}")
    if role is not None and not role:
        raise ValueError("reward role must be a role's name (as relight.role() or an adapter names it), got ''")
    kept = current_rewards()
    try:
        ref = kept.ref if kept is not None else current_attempt()
        if ref is None:
            logger.warning("relight: reward emitted outside a rollout attempt was not recorded")
            return
        span = reward_span(ref, value, name=name, role=role)
        if kept is not None:
            kept.add(span)
            return
        batcher = _processor.batcher_for(ref.rollout_id, ref.attempt_id) if _processor is not None else None
        if batcher is None:
            logger.warning("relight: reward of attempt %s was not recorded: relight's tracing is not installed", ref)
            return
        batcher.submit(span)
    except Exception as error:
        hook_failed("emitting reward")
        if kept is not None:
            kept.failed(f"relight.emit_reward({value!r}, name={name!r}) failed: {error!r}")


def emit_annotation(payload: Mapping[str, JsonValue], *, name: str = "annotation") -> None:
    """Record free-form facts about the current attempt (a score breakdown, the final answer)."""
    _emit(
        f"annotation {name}",
        {semconv.SPAN_KIND: SpanKind.ANNOTATION.value, semconv.ANNOTATION: json.dumps(payload, default=str)},
    )


def _emit(span_name: str, attributes: Mapping[str, str | float | bool | Sequence[str]]) -> None:
    """Record a span of the current attempt; a failing tracer is counted and logged, never raised."""
    try:
        if current_attempt() is None:
            logger.warning("relight: %s emitted outside a rollout attempt was not recorded", span_name)
            return
        with tracer().start_as_current_span(span_name, attributes=attributes):
            pass
    except Exception:
        hook_failed(f"emitting {span_name.split()[0]}")
