"""A replay's spans against the recording's: the same, ids and times aside, or what differs.

Ids (span, trace, response, framework run ids), times, the attempt a span belongs to and the address of the
server that answered differ between any two runs; everything else a span says (its name, kind, status, the
messages, tokens, tool results and rewards in its attributes, and which span it sits under) is compared.
Spans are compared as collections, so spans that start in another order (concurrent calls) still match.
What a trainer or a rescore wrote on the attempt afterwards (what was trained or dropped, rescored rewards)
is no part of what the agent did, and is left out. A resource the agent read is compared by its name and
where it came from (published or the default), not by the number of the resources version that held it:
each store numbers its versions itself, and a replay publishes the recorded items in its own store.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, cast

from relight import semconv
from relight.records import Span, SpanKind
from relight.transitions.trained_calls import TRAINED_SPAN

__all__ = ["VOLATILE_ATTRIBUTES", "span_differences"]

VOLATILE_ATTRIBUTES = frozenset(
    {
        semconv.GEN_AI_RESPONSE_ID,
        semconv.ROLLOUT_ID,
        semconv.ATTEMPT_ID,
        semconv.UPSTREAM,
        semconv.FRAMEWORK_RUN_ID,
    }
)
"""Attributes that name this run of a span rather than what happened in it."""
_AFTERWARDS = frozenset({TRAINED_SPAN, semconv.DROPPED_SPAN})
"""Annotations a trainer writes on an attempt once it has ended."""


def span_differences(recorded: Sequence[Span], replayed: Sequence[Span]) -> list[str]:
    """Each way the replayed spans differ from the recorded ones, in words ([] when they are alike): a span one
    side has and the other lacks, or the parts (attributes by name) in which a span of the same name differs."""
    before, after = Counter(_facts(recorded)), Counter(_facts(replayed))
    only_recorded = [json.loads(fact) for fact in sorted((before - after).elements())]
    only_replayed = [json.loads(fact) for fact in sorted((after - before).elements())]
    differences: list[str] = []
    for fact in only_recorded:
        partner = next(
            (other for other in only_replayed if (other["name"], other["under"]) == (fact["name"], fact["under"])),
            None,
        )
        if partner is None:
            differences.append(f"span {fact['name']!r} was recorded but not replayed")
            continue
        only_replayed.remove(partner)
        parts = [key for key in ("status", "message") if fact[key] != partner[key]]
        names = sorted({*fact["attributes"], *partner["attributes"]})
        parts += [name for name in names if fact["attributes"].get(name) != partner["attributes"].get(name)]
        differences.append(f"span {fact['name']!r} differs in {', '.join(parts)}")
    differences += [f"span {fact['name']!r} was replayed but not recorded" for fact in only_replayed]
    return differences


def _facts(spans: Sequence[Span]) -> list[str]:
    """Each span as JSON text without its ids and times: its name, status, attributes and its parent's name."""
    by_id: Mapping[str, Span] = {span.span_id: span for span in spans}
    facts: list[str] = []
    for span in spans:
        if span.kind is SpanKind.RESCORED or (span.kind is SpanKind.ANNOTATION and span.name in _AFTERWARDS):
            continue
        parent = by_id.get(span.parent_id) if span.parent_id else None
        attributes = {key: value for key, value in span.attributes.items() if key not in VOLATILE_ATTRIBUTES}
        if span.kind is SpanKind.ANNOTATION and semconv.RESOURCE_SOURCE in attributes:
            attributes = _without_version_number(attributes)
        fact: dict[str, Any] = {
            "name": span.name,
            "status": span.status_code,
            "message": span.status_message,
            "under": parent.name if parent is not None else None,
            "attributes": attributes,
        }
        facts.append(json.dumps(fact, sort_keys=True, ensure_ascii=False, default=str))
    return facts


def _without_version_number(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A resource read's attributes without the number its store gave the version read (see the module)."""
    kept = {key: value for key, value in attributes.items() if key != semconv.RESOURCES_VERSION}
    annotation = kept.get(semconv.ANNOTATION)
    if isinstance(annotation, str):
        try:
            read = json.loads(annotation)
        except ValueError:
            return kept
        if isinstance(read, dict):
            fields = cast(dict[str, Any], read)
            kept[semconv.ANNOTATION] = json.dumps({k: v for k, v in fields.items() if k != "version"}, sort_keys=True)
    return kept
