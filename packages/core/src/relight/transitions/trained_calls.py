"""Which calls an update learned from, at which policy version and with what advantage, kept in the store.

Transitions live only in the trainer's memory, and an advantage only inside the algorithm's update,
so after each update the trainer records what became of every transition it handed over
(:func:`record_update`), and that record is the one truth about training that
:meth:`relight.TransitionBuilder.explain` (and so ``relight show``, ``relight export`` and the
dashboard) reads back:

- an update that changed the weights (the algorithm's ``policy_version`` rose) writes, on every
  attempt it learned from, one annotation span named ``relight.trained``: the LLM span ids of the
  calls it trained, the policy version it made (with several policies, each call's own policy's
  version too: an attempt may hold calls of two policies) and, when the algorithm reports them, the
  advantage each was trained with (:func:`trained_calls` reads it back). A call of a group without signal
  (all rewards equal) is not among them when the algorithm skips such groups (``skips_flat_groups``,
  as GRPO does); an attempt all of whose calls were left out so is marked ``no_signal``
  (:mod:`relight.transitions.drops`);
- an update that left the weights as they were marks every attempt it was given ``update_skipped``.

An algorithm reports advantages with an ``advantages(transitions)`` method (:class:`ReportsAdvantages`)
that returns the advantage its update gives each transition, in order. Recording is a side job: an
algorithm whose ``advantages`` fails, or a store that refuses the spans, costs the record, not the run
(:mod:`relight.tracing.hook_failures`). A step made again after a crash records each call once
(see :func:`record_trained`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from pydantic import JsonValue

from relight import semconv
from relight.algorithm import policy_versions
from relight.errors import InvalidStateError, RelightError
from relight.records import Span, SpanKind, Transition
from relight.store import Store
from relight.tracing.hook_failures import hook_failed
from relight.transitions.drops import DropReason, mark_attempts
from relight.transitions.learning_signal import GroupKey, flat_groups, group_key

__all__ = [
    "TRAINED_SPAN",
    "ReportsAdvantages",
    "TrainedCall",
    "record_trained",
    "record_update",
    "skipped_groups",
    "trained_calls",
]

TRAINED_SPAN = "relight.trained"
_SPAN_IDS = "relight.trained.span_ids"
_ADVANTAGES = "relight.trained.advantages"
_VERSIONS = "relight.trained.policy_versions"


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
    """The version the update that trained it made: its policy's, where the run has several."""


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


async def record_trained(
    store: Store,
    algorithm: object,
    transitions: Sequence[Transition],
    version: int,
    *,
    left_out: Collection[GroupKey] = (),
) -> None:
    """After an update to policy ``version``: one ``relight.trained`` span on each attempt it trained on.

    Advantages are asked for the whole batch (REINFORCE++ whitens over it); the transitions of the
    groups in ``left_out`` (``(policy, group_id)``, see :mod:`relight.transitions.learning_signal`) are then not listed.
    An algorithm training several policies (``policy_versions``) has each call stamped with its policy's version.
    """
    versions = policy_versions(algorithm) or {}
    by_attempt: dict[tuple[str, str], list[tuple[str, float | None, int]]] = {}
    for transition, advantage in zip(transitions, _advantages(algorithm, transitions), strict=True):
        if transition.span_id is not None and group_key(transition) not in left_out:
            key = (transition.rollout_id, transition.attempt_id)
            own = versions.get(transition.policy, version) if transition.policy is not None else version
            by_attempt.setdefault(key, []).append((transition.span_id, advantage, own))
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
                _SPAN_IDS: [span_id for span_id, _, _ in calls],
                _ADVANTAGES: [advantage for _, advantage, _ in calls],
                **({_VERSIONS: [own for _, _, own in calls]} if versions else {}),
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


def skipped_groups(algorithm: object, transitions: Sequence[Transition]) -> set[GroupKey]:
    """The groups an update that changed the weights did not learn from: the flat ones, where it skips them.

    A group is a policy's (a group can be flat for one policy and not for another).
    """
    return flat_groups(transitions) if getattr(algorithm, "skips_flat_groups", False) is True else set()


async def record_update(
    store: Store, algorithm: object, transitions: Sequence[Transition], *, version_before: int
) -> bool:
    """After an update: record what became of each of its ``transitions``; True if the weights changed.

    The weights changed when the algorithm's ``policy_version`` rose past ``version_before``.
    """
    version = int(getattr(algorithm, "policy_version", version_before))
    changed = version > version_before
    attempts = list(dict.fromkeys((t.rollout_id, t.attempt_id) for t in transitions))
    try:
        if not changed:
            await mark_attempts(store, attempts, DropReason.UPDATE_SKIPPED, policy_version=version)
            return False
        skipped = skipped_groups(algorithm, transitions)
        await record_trained(store, algorithm, transitions, version, left_out=skipped)
        with_learned = {(t.rollout_id, t.attempt_id) for t in transitions if group_key(t) not in skipped}
        flat = [attempt for attempt in attempts if attempt not in with_learned]
        await mark_attempts(store, flat, DropReason.NO_SIGNAL, policy_version=version)
    except RelightError:
        hook_failed("recording which calls an update trained on")
    return changed


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
        own = span.attributes.get(_VERSIONS)
        versions: list[JsonValue] = [version] * len(ids)
        if isinstance(own, list) and len(own) == len(ids):
            versions = cast(list[JsonValue], own)
        for span_id, advantage, call_version in zip(ids, cast(list[JsonValue], advantages), versions, strict=True):
            number = None if isinstance(advantage, bool) or not isinstance(advantage, int | float) else float(advantage)
            whole = call_version if isinstance(call_version, int) and not isinstance(call_version, bool) else None
            trained[str(span_id)] = TrainedCall(number, whole)
    return trained
