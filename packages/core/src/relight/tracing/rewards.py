"""Rewards reach the store by a path of their own: a failing tracer never costs a rollout its reward.

A rollout's reward is what training learns from, so it must not depend on the parts of relight that
record everything else. The OpenTelemetry tracer, the span processor and the span batcher are a side
job whose failures cost a span (:mod:`.hook_failures`); a reward is made into its span record here,
without a tracer (:func:`reward_span`), and given to the attempt's :class:`AttemptRewards`, which
the runner keeps for the attempt. It sends the record with the attempt's other spans, and before the
attempt ends the runner writes to the store itself any reward that path may have lost
(:meth:`AttemptRewards.store_unsent`). A reward that could not even be recorded (emitting it failed)
fails the attempt with the reason (:meth:`AttemptRewards.failure`). So ``succeeded`` always means
"its reward is stored".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace
from pydantic import JsonValue

from relight import semconv
from relight._internal.ids import random_hex
from relight.records import Span, SpanKind
from relight.store import Store
from relight.tracing.batcher import SpanBatcher
from relight.tracing.context import AttemptRef
from relight.tracing.hook_failures import hook_failed

__all__ = ["AttemptRewards", "current_rewards", "reward_span"]


def reward_span(
    ref: AttemptRef,
    value: float,
    *,
    name: str = "reward",
    role: str | None = None,
    at: int | None = None,
    trace_id: str | None = None,
) -> Span:
    """The reward span of attempt ``ref``: ``value`` under ``name`` (for ``role`` alone when given), at ``at``.

    The span sits in the trace of the OpenTelemetry span current where it is made (under it), when
    there is one; otherwise in ``trace_id``, or a trace of its own.
    """
    at = at if at is not None else time.time_ns()
    parent_id, current_trace = _current_span_ids()
    attributes: dict[str, JsonValue] = {
        semconv.SPAN_KIND: SpanKind.REWARD.value,
        semconv.REWARD: float(value),
        semconv.REWARD_NAME: name,
        semconv.ROLLOUT_ID: ref.rollout_id,
        semconv.ATTEMPT_ID: ref.attempt_id,
    }
    if role is not None:
        attributes[semconv.REWARD_ROLE] = role
    return Span(
        rollout_id=ref.rollout_id,
        attempt_id=ref.attempt_id,
        span_id=random_hex(16),
        trace_id=current_trace or trace_id or random_hex(32),
        parent_id=parent_id,
        name=f"reward {name}",
        start_time=at,
        end_time=at,
        attributes=attributes,
    )


def _current_span_ids() -> tuple[str | None, str | None]:
    """(span id, trace id) of the OpenTelemetry span current here, or Nones; never raises (the API may be broken)."""
    try:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return format(context.span_id, "016x"), format(context.trace_id, "032x")
    except Exception:
        hook_failed("reading the current span for a reward")
    return None, None


class AttemptRewards:
    """The rewards of one attempt, kept by its runner until they are in the store.

    :meth:`add` hands each to ``batcher`` with the attempt's other spans; one the batcher did not take
    is kept for :meth:`store_unsent`. :meth:`failed` notes a reward that could not be recorded at all.
    Safe to call from the agent's threads.
    """

    def __init__(self, ref: AttemptRef, batcher: SpanBatcher | None) -> None:
        self.ref = ref
        self._batcher = batcher
        self._lock = threading.Lock()
        self._unsent: list[Span] = []
        self._failures: list[str] = []

    def add(self, span: Span) -> None:
        """Record a reward span; it reaches the store with the attempt's spans, or by :meth:`store_unsent`."""
        try:
            if self._batcher is None:
                raise RuntimeError("no span batcher")
            self._batcher.submit(span)
        except Exception:
            hook_failed("sending a reward span to the span batcher")
            with self._lock:
                self._unsent.append(span)

    def failed(self, why: str) -> None:
        """Note a reward that was emitted but could not be recorded: the attempt must not succeed."""
        with self._lock:
            self._failures.append(why)

    def failure(self) -> str | None:
        """Why the attempt lost a reward it was given, or None when it lost none."""
        with self._lock:
            failures = list(self._failures)
        if not failures:
            return None
        return f"{len(failures)} reward(s) of the attempt could not be recorded: {failures[0]}"

    async def store_unsent(self, store: Store) -> str | None:
        """Write the rewards the batcher did not take straight to ``store``; why not, if that failed too."""
        with self._lock:
            unsent, self._unsent = self._unsent, []
        if not unsent:
            return None
        try:
            await store.add_spans(unsent)
        except Exception as error:  # the attempt fails with this reason, which its runner logs
            return f"{len(unsent)} reward span(s) could not be written to the store: {error!r}"
        return None

    @contextmanager
    def scope(self) -> Generator[AttemptRewards]:
        """Make these the rewards :func:`relight.emit_reward` records to, in the block (and tasks and copied
        contexts started in it)."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)


_current: ContextVar[AttemptRewards | None] = ContextVar("relight_attempt_rewards", default=None)


def current_rewards() -> AttemptRewards | None:
    """The rewards of the attempt the calling code runs under, when a runner keeps them."""
    return _current.get()
