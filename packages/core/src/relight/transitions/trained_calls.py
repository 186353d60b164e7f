"""Which calls an update learned from, at which policy version and with what advantage, kept in the store.

Transitions live only in the trainer's memory, and an advantage only inside the algorithm's update,
so after each update the trainer writes, on every attempt it trained on, one annotation span named
``relight.trained``: the LLM span ids of its calls that were trained, the policy version the update
made and, when the algorithm reports them, the advantage each was trained with. The dashboard's
rollout page reads it back (:func:`trained_calls`) beside the transition each call became.

An algorithm reports advantages with an ``advantages(transitions)`` method (:class:`ReportsAdvantages`)
that returns the advantage its update gives each transition, in order. Recording is a side job: an
algorithm whose ``advantages`` fails, or a store that refuses the spans, costs the record, not the run
(:mod:`relight.tracing.hook_failures`). A step made again after a crash records each call once
(see :func:`record_trained`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from pydantic import JsonValue

from relight import semconv
from relight.errors import InvalidStateError, RelightError
from relight.records import Span, SpanKind, Transition
from relight.store import Store
from relight.tracing.hook_failures import hook_failed

__all__ = ["TRAINED_SPAN", "ReportsAdvantages", "TrainedCall", "record_trained", "trained_calls"]

TRAINED_SPAN = "relight.trained"
_SPAN_IDS = "relight.trained.span_ids"
_ADVANTAGES = "relight.trained.advantages"


@runtime_checkable
class ReportsAdvantages(Protocol):
    """An algorithm that can say the advantage its update gives each transition."""

    def advantages(self, transitions: Sequence[Transition]) -> Sequence[float]: ...


@dataclass(frozen=True, slots=True)
class TrainedCall:
    """How one call was trained."""

    advantage: float | None
    """None when the algorithm reported none."""
    policy_version: int | None
    """The version the update that trained it made."""


def _advantages(algorithm: object, transitions: Sequence[Transition]) -> list[float | None]:
    if isinstance(algorithm, ReportsAdvantages):
        try:
            values = [float(value) for value in algorithm.advantages(transitions)]
            if len(values) != len(transitions):
                raise ValueError(f"advantages() gave {len(values)} values for {len(transitions)} transitions")
            return [value if math.isfinite(value) else None for value in values]
        except Exception:
            hook_failed("the algorithm's advantages()")
    return [None] * len(transitions)


async def record_trained(store: Store, algorithm: object, transitions: Sequence[Transition], version: int) -> None:
    """After an update to policy ``version``: one ``relight.trained`` span on each attempt it trained on."""
    by_attempt: dict[tuple[str, str], list[tuple[str, float | None]]] = {}
    for transition, advantage in zip(transitions, _advantages(algorithm, transitions), strict=True):
        if transition.span_id is not None:
            key = (transition.rollout_id, transition.attempt_id)
            by_attempt.setdefault(key, []).append((transition.span_id, advantage))
    now = time.time_ns()
    spans = [
        Span(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            span_id=f"trained-v{version}-{attempt_id}",
            trace_id=f"trained-v{version}",
            name=TRAINED_SPAN,
            start_time=now,
            end_time=now,
            attributes={
                semconv.SPAN_KIND: SpanKind.ANNOTATION.value,
                semconv.POLICY_VERSION: version,
                _SPAN_IDS: [span_id for span_id, _ in calls],
                _ADVANTAGES: [advantage for _, advantage in calls],
            },
        )
        for (rollout_id, attempt_id), calls in by_attempt.items()
    ]
    try:
        await store.add_spans(spans)
    except InvalidStateError:
        await _record_again(store, spans)
    except RelightError:
        hook_failed("recording which calls an update trained on")


async def _record_again(store: Store, spans: Sequence[Span]) -> None:
    """A step done again by a resumed run whose first try died between this record and its checkpoint.

    The attempts it reused hold the record of that try already (same calls, same policy version), so
    theirs stays and only the attempts new to this try get one: never two records of one call.
    """
    for span in spans:
        try:
            await store.add_spans([span])
        except InvalidStateError:
            continue
        except RelightError:
            hook_failed("recording which calls an update trained on")
            return


def trained_calls(spans: Iterable[Span]) -> dict[str, TrainedCall]:
    """LLM span id → how it was trained, from the ``relight.trained`` spans among ``spans``."""
    trained: dict[str, TrainedCall] = {}
    for span in spans:
        if span.name != TRAINED_SPAN or span.kind is not SpanKind.ANNOTATION:
            continue
        ids, advantages = span.attributes.get(_SPAN_IDS), span.attributes.get(_ADVANTAGES)
        version = span.attributes.get(semconv.POLICY_VERSION)
        if not (isinstance(ids, list) and isinstance(advantages, list) and len(ids) == len(advantages)):
            continue
        for span_id, advantage in zip(ids, cast(list[JsonValue], advantages), strict=True):
            number = None if isinstance(advantage, bool) or not isinstance(advantage, int | float) else float(advantage)
            trained[str(span_id)] = TrainedCall(number, version if isinstance(version, int) else None)
    return trained
