"""Why a finished rollout was never trained on, written where the store and a dashboard can read it.

The asynchronous trainer (:mod:`relight.training.async_loop`) drops a group whose transitions are too
many policy versions behind, and cancels one that ages out; an update that changes no weights, or
leaves a group out for want of signal, trains none of its calls either. Each such rollout
gets, on its latest attempt (or the attempt the update read), an annotation span named ``relight.dropped`` whose
``relight.dropped.reason`` attribute is a :class:`DropReason`; :func:`dropped_reason` reads it
back from an attempt's spans. A rollout cancelled before any attempt started has no attempt to
carry the span; its status (``cancelled``) is all there is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from enum import StrEnum

from relight import semconv
from relight._internal.ids import random_hex
from relight.records import Span, SpanKind
from relight.store import Store

__all__ = ["DROPPED_SPAN", "DropReason", "dropped_reason", "mark_attempts", "mark_dropped"]

DROPPED_SPAN = semconv.DROPPED_SPAN


class DropReason(StrEnum):
    """Why the trainer left a group out."""

    STALENESS = "staleness"
    """A transition was more than ``max_staleness`` policy versions behind the update."""
    AGED_OUT = "aged_out"
    """Still unfinished when it could no longer be trained on in time: cancelled."""
    UPDATE_SKIPPED = "update_skipped"
    """Its calls entered an update that left the weights unchanged (see :mod:`relight.transitions.trained_calls`)."""
    NO_SIGNAL = "no_signal"
    """Every call it could train on sat in a group whose rewards were all equal: the algorithm skipped them."""


async def mark_dropped(store: Store, rollout_ids: Sequence[str], reason: DropReason, *, policy_version: int) -> None:
    """Record on each rollout's latest attempt that it was dropped, why, and at which policy version."""
    attempts: list[tuple[str, str]] = []
    for rollout_id in rollout_ids:
        listed = await store.list_attempts(rollout_id)
        if listed:
            attempts.append((rollout_id, listed[-1].attempt_id))
    await mark_attempts(store, attempts, reason, policy_version=policy_version)


async def mark_attempts(
    store: Store, attempts: Sequence[tuple[str, str]], reason: DropReason, *, policy_version: int
) -> None:
    """Record on each ``(rollout id, attempt id)`` that its calls were not trained, why, and at which version."""
    now = time.time_ns()
    payload = json.dumps({"dropped": reason.value, "policy_version": policy_version})
    spans = [
        Span(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            span_id=random_hex(16),
            trace_id=random_hex(32),
            name=DROPPED_SPAN,
            start_time=now,
            end_time=now,
            attributes={
                semconv.SPAN_KIND: SpanKind.ANNOTATION.value,
                semconv.ANNOTATION: payload,
                semconv.DROPPED_REASON: reason.value,
            },
        )
        for rollout_id, attempt_id in attempts
    ]
    if spans:
        await store.add_spans(spans)


def dropped_reason(spans: Iterable[Span]) -> DropReason | None:
    """The reason the trainer dropped the attempt these spans belong to; None if it did not."""
    for span in spans:
        if span.name == DROPPED_SPAN and span.kind is SpanKind.ANNOTATION:
            try:
                return DropReason(str(span.attributes.get(semconv.DROPPED_REASON)))
            except ValueError:
                continue
    return None
