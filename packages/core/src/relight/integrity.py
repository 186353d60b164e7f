"""A store checked for what training relies on, like ``fsck`` for training data: ``relight verify``.

:func:`verify_store` reads a store through the :class:`relight.Store` protocol alone, so it checks every
backend (SQLite, PostgreSQL, an HTTP store server, memory) and writes nothing. Each kind of finding comes
with its count and a few example ids (``rollout/attempt/span``). A *problem* means the store holds
something training must not trust, and ``relight verify`` exits non-zero; a *notice* is said, not wrong.

Problems:

- ``reward_missing``: a succeeded training rollout whose counted attempt holds no reward, and nothing says why.
- ``reward_invalid``: a reward span whose value is not a finite number.
- ``status_inconsistent``: a succeeded rollout without a succeeded attempt, a finished one with an attempt
  still running, or a rollout whose attempt count differs from the attempts it has.
- ``span_without_attempt``: a span naming an attempt its rollout does not have.
- ``span_without_rollout``: spans the store counts that no rollout holds (those of a rollout gone).
- ``duplicate_span``: one span id twice in an attempt, or one LLM call (trace and span id) in two attempts:
  it would be trained twice.
- ``token_ids_malformed``: an LLM call whose token ids are not lists of token ids, or whose prompt is empty.
- ``logprobs_misaligned``: response logprobs that are not one finite log-probability per response token.
- ``usage_mismatch``: an LLM call whose recorded token counts differ from its token ids (not retokenized).
- ``transition_mismatch``: an LLM call whose transition, built again from the spans by the code that builds
  them for training, differs from what the span recorded, or cannot be built.
- ``trained_call_missing``: an update's record names a call the attempt does not hold.
- ``exactness_mark_wrong`` (with a tokenizer): an imported call whose stored token ids or exactness mark
  differ from retokenizing it again.

Notices:

- ``no_reward_explained``: a succeeded rollout without a reward whose group reward says why (no signal).
- ``imported_without_reward``: an imported trace that recorded no reward (``relight.otlp.add_reward``).
- ``val_without_reward``: a validation (or ``Trainer.dev``) rollout whose agent returned and emitted no reward
  (one rewarded by a group reward, such as a judge, which scores training groups only).
- ``imported_inexact`` (with a tokenizer): an imported call whose ids are not exactly the call (text, tool calls,
  tool results and tools), with the reasons; training and export leave it out and count it by default.
- ``imported_not_retokenizable`` (with a tokenizer): an imported call that cannot be rendered (its text is missing).
- ``imported_not_rechecked``: imported calls whose exactness was not re-checked, for want of a tokenizer.

Imported calls are re-checked with :func:`relight.otlp.imported_calls.retokenize_call`, the one decision of
their exactness that training and export use too.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

from relight import semconv
from relight.otlp.imported_calls import TemplateRetokenizer, retokenize_call
from relight.otlp.importer import SOURCE
from relight.records import Attempt, AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind
from relight.store import Store
from relight.transitions.builder import TransitionBuilder
from relight.transitions.trained_calls import trained_calls

__all__ = ["FINDINGS", "Finding", "IntegrityReport", "verify_store"]

Severity = Literal["problem", "notice"]

FINDINGS: dict[str, tuple[Severity, str]] = {
    "reward_missing": ("problem", "succeeded training rollouts whose counted attempt holds no reward, no reason given"),
    "reward_invalid": ("problem", "reward spans whose value is not a finite number"),
    "status_inconsistent": ("problem", "rollouts whose status or attempt count disagrees with their attempts"),
    "span_without_attempt": ("problem", "spans naming an attempt their rollout does not have"),
    "span_without_rollout": ("problem", "spans the store counts that no rollout holds"),
    "duplicate_span": ("problem", "span ids stored twice in an attempt, or LLM calls stored in two attempts"),
    "token_ids_malformed": ("problem", "LLM calls whose token ids are not lists of token ids (or an empty prompt)"),
    "logprobs_misaligned": ("problem", "LLM calls without one finite log-probability per response token"),
    "usage_mismatch": ("problem", "LLM calls whose recorded token counts differ from their token ids"),
    "transition_mismatch": ("problem", "LLM calls whose transition, built again, differs from the span or fails"),
    "trained_call_missing": ("problem", "calls an update's record names that the attempt does not hold"),
    "exactness_mark_wrong": ("problem", "imported calls whose stored ids or exactness differ from a fresh check"),
    "no_reward_explained": ("notice", "succeeded rollouts without a reward whose group reward says why"),
    "imported_without_reward": ("notice", "imported traces that recorded no reward (relight.otlp.add_reward)"),
    "val_without_reward": ("notice", "validation or dev rollouts whose agent returned and emitted no reward"),
    "imported_inexact": ("notice", "imported calls whose tokens do not reproduce their text exactly"),
    "imported_not_retokenizable": ("notice", "imported calls that cannot be retokenized: their text is missing"),
    "imported_not_rechecked": ("notice", "imported calls not re-checked for exactness: no tokenizer was given"),
}
"""Each kind of finding: its severity and what it means."""

EXAMPLES = 5
"""Example ids kept per kind of finding."""


@dataclass(slots=True)
class Finding:
    """One kind of finding: how many, a few examples (``rollout/attempt/span``, with the detail), and what it means."""

    kind: str
    count: int = 0
    examples: list[str] = field(default_factory=list[str])

    @property
    def severity(self) -> Severity:
        return FINDINGS[self.kind][0]

    @property
    def meaning(self) -> str:
        return FINDINGS[self.kind][1]


@dataclass(slots=True)
class IntegrityReport:
    """What :func:`verify_store` found; ``clean`` when no finding is a problem."""

    rollouts: int = 0
    attempts: int = 0
    spans: int = 0
    llm_calls: int = 0
    """LLM calls with token ids whose transitions were built again."""
    imported_calls_rechecked: int = 0
    findings: dict[str, Finding] = field(default_factory=dict[str, Finding])

    @property
    def problems(self) -> dict[str, Finding]:
        return {kind: f for kind, f in self.findings.items() if f.severity == "problem"}

    @property
    def notices(self) -> dict[str, Finding]:
        return {kind: f for kind, f in self.findings.items() if f.severity == "notice"}

    @property
    def clean(self) -> bool:
        return not self.problems

    def add(self, kind: str, example: str | None = None, *, count: int = 1) -> None:
        finding = self.findings.setdefault(kind, Finding(kind))
        finding.count += count
        if example is not None and len(finding.examples) < EXAMPLES:
            finding.examples.append(example)

    def as_json(self) -> dict[str, JsonValue]:
        """The report as one JSON object (``relight verify --json``)."""

        def entries(findings: Mapping[str, Finding]) -> dict[str, JsonValue]:
            return {
                kind: {"count": f.count, "examples": list[JsonValue](f.examples), "meaning": f.meaning}
                for kind, f in sorted(findings.items())
            }

        return {
            "clean": self.clean,
            "checked": {
                "rollouts": self.rollouts,
                "attempts": self.attempts,
                "spans": self.spans,
                "llm_calls": self.llm_calls,
                "imported_calls_rechecked": self.imported_calls_rechecked,
            },
            "problems": entries(self.problems),
            "notices": entries(self.notices),
        }


PAGE = 500
"""Rollouts read per page."""
AT_ONCE = 8
"""Rollouts read at once (an HTTP store answers each call in a round trip)."""


async def verify_store(store: Store, *, retokenizer: TemplateRetokenizer | None = None) -> IntegrityReport:
    """Check every rollout, attempt and span of ``store`` (reading only); imported calls are re-checked for
    exactness with ``retokenizer`` when one is given."""
    report = IntegrityReport()
    counted = (await store.stats()).spans  # before reading: spans added meanwhile are never taken for strays
    calls: dict[tuple[str, str], str] = {}
    offset = 0
    while page := await store.list_rollouts(limit=PAGE, offset=offset):
        offset += len(page)
        for start in range(0, len(page), AT_ONCE):
            batch = page[start : start + AT_ONCE]
            read = await asyncio.gather(
                *(asyncio.gather(store.list_attempts(r.rollout_id), store.query_spans(r.rollout_id)) for r in batch)
            )
            for rollout, (attempts, spans) in zip(batch, read, strict=True):
                _check_rollout(report, rollout, attempts, spans, calls, retokenizer)
    if counted > report.spans:
        report.add("span_without_rollout", f"{counted - report.spans} of {counted} spans", count=counted - report.spans)
    return report


def _check_rollout(
    report: IntegrityReport,
    rollout: Rollout,
    attempts: Sequence[Attempt],
    spans: Sequence[Span],
    calls: dict[tuple[str, str], str],
    retokenizer: TemplateRetokenizer | None,
) -> None:
    report.rollouts += 1
    report.attempts += len(attempts)
    report.spans += len(spans)
    rid = rollout.rollout_id
    _check_status(report, rollout, attempts)
    known = {attempt.attempt_id for attempt in attempts}
    by_attempt: dict[str, list[Span]] = {}
    for span in spans:
        by_attempt.setdefault(span.attempt_id, []).append(span)
    for attempt_id, own in by_attempt.items():
        if attempt_id not in known:
            for span in own:
                report.add("span_without_attempt", f"{rid}/{attempt_id}/{span.span_id}")
            continue
        _check_attempt(report, rollout, attempt_id, own, calls)
    imported = rollout.metadata.get("source") == SOURCE
    counted = next((a.attempt_id for a in reversed(attempts) if a.status is AttemptStatus.SUCCEEDED), None)
    if rollout.status is RolloutStatus.SUCCEEDED and counted is not None:
        _check_reward(report, rollout, counted, by_attempt.get(counted, []), imported)
    if imported:
        _recheck_imported(report, rid, spans, retokenizer)


def _check_status(report: IntegrityReport, rollout: Rollout, attempts: Sequence[Attempt]) -> None:
    rid = rollout.rollout_id
    if rollout.status is RolloutStatus.SUCCEEDED and not any(a.status is AttemptStatus.SUCCEEDED for a in attempts):
        report.add("status_inconsistent", f"{rid}: succeeded, but none of its {len(attempts)} attempt(s) did")
    elif rollout.is_finished and any(a.status is AttemptStatus.RUNNING for a in attempts):
        report.add("status_inconsistent", f"{rid}: {rollout.status.value}, with an attempt still running")
    elif rollout.attempt_count != len(attempts):
        report.add("status_inconsistent", f"{rid}: counts {rollout.attempt_count} attempt(s), has {len(attempts)}")


def _check_attempt(
    report: IntegrityReport, rollout: Rollout, attempt_id: str, spans: Sequence[Span], calls: dict[tuple[str, str], str]
) -> None:
    where = f"{rollout.rollout_id}/{attempt_id}"
    for span_id, times in Counter(span.span_id for span in spans).items():
        if times > 1:
            report.add("duplicate_span", f"{where}/{span_id}: {times} times in the attempt")
    held = set[str]()
    for span in spans:
        if span.kind is SpanKind.REWARD and _number(span.attributes.get(semconv.REWARD)) is None:
            report.add("reward_invalid", f"{where}/{span.span_id}: {span.attributes.get(semconv.REWARD)!r}")
        if span.kind is not SpanKind.LLM:
            continue
        held.add(span.span_id)
        key = (span.trace_id, span.span_id)
        first = calls.setdefault(key, f"{where}/{span.span_id}")
        if first != f"{where}/{span.span_id}":
            report.add("duplicate_span", f"{where}/{span.span_id}: also stored as {first}")
        if span.status_code != "ERROR":
            _check_call(report, f"{where}/{span.span_id}", span.attributes)
    for span_id in trained_calls(spans):
        if span_id not in held:
            report.add("trained_call_missing", f"{where}/{span_id}")
    _rebuild(report, rollout, attempt_id, spans, where)


def _check_call(report: IntegrityReport, where: str, attributes: Mapping[str, JsonValue]) -> None:
    """The token ids, logprobs and token counts of one LLM call that has ids, each as the span itself states them."""
    prompt = attributes.get(semconv.PROMPT_TOKEN_IDS)
    response = attributes.get(semconv.RESPONSE_TOKEN_IDS)
    if prompt is None and response is None:
        return
    if not (_token_ids(prompt) and prompt and _token_ids(response)):
        report.add("token_ids_malformed", f"{where}: prompt {_shape(prompt)}, response {_shape(response)}")
        return
    assert isinstance(prompt, list)
    assert isinstance(response, list)
    logprobs = attributes.get(semconv.RESPONSE_LOGPROBS)
    if logprobs is not None and not _aligned(logprobs, len(response)):
        report.add("logprobs_misaligned", f"{where}: {_shape(logprobs)} for {len(response)} response token(s)")
    if attributes.get(semconv.RETOKENIZED) is not True:
        for name, ids in ((semconv.GEN_AI_USAGE_INPUT_TOKENS, prompt), (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, response)):
            told = attributes.get(name)
            if isinstance(told, int) and not isinstance(told, bool) and told != len(ids):
                report.add("usage_mismatch", f"{where}: {name} {told}, {len(ids)} token id(s)")


def _rebuild(report: IntegrityReport, rollout: Rollout, attempt_id: str, spans: Sequence[Span], where: str) -> None:
    """Build the attempt's transitions again, as training does, and compare each with the span it came from."""
    try:
        verdicts = TransitionBuilder().judge(rollout, attempt_id, spans)
    except Exception as error:
        report.add("transition_mismatch", f"{where}: the transitions cannot be built: {error!r}")
        return
    for verdict in verdicts:
        transition, attributes = verdict.transition, verdict.span.attributes
        if transition is None:
            continue
        report.llm_calls += 1
        recorded = (
            attributes.get(semconv.PROMPT_TOKEN_IDS),
            attributes.get(semconv.RESPONSE_TOKEN_IDS),
            attributes.get(semconv.RESPONSE_LOGPROBS),
        )
        rebuilt = (transition.prompt_token_ids, transition.response_token_ids, transition.response_logprobs)
        if list(rebuilt) != list(recorded):
            names = ("prompt ids", "response ids", "logprobs")
            differs = [name for name, a, b in zip(names, rebuilt, recorded, strict=True) if a != b]
            report.add("transition_mismatch", f"{where}/{verdict.span.span_id}: {', '.join(differs)} differ")


def _check_reward(
    report: IntegrityReport, rollout: Rollout, attempt_id: str, spans: Sequence[Span], imported: bool
) -> None:
    if any(span.kind is SpanKind.REWARD for span in spans):
        return
    where = f"{rollout.rollout_id}/{attempt_id}"
    why = _no_reward_reason(spans)
    if why is not None:
        report.add("no_reward_explained", f"{where}: {why}")
    elif imported:
        report.add("imported_without_reward", where)
    elif rollout.mode is Mode.VAL:
        report.add("val_without_reward", where)
    else:
        report.add("reward_missing", where)


def _no_reward_reason(spans: Sequence[Span]) -> str | None:
    """Why a group reward gave the attempt none, where its note (an annotation span) says so."""
    for span in spans:
        if span.kind is not SpanKind.ANNOTATION:
            continue
        try:
            note = json.loads(str(span.attributes.get(semconv.ANNOTATION)))
        except ValueError:
            continue
        if isinstance(note, dict) and ("no_signal" in note or "error" in note):
            return f"{span.name}: {note.get('no_signal') or note.get('error')}"  # pyright: ignore[reportUnknownMemberType]
    return None


_DERIVED = frozenset(
    {
        semconv.PROMPT_TOKEN_IDS,
        semconv.RESPONSE_TOKEN_IDS,
        semconv.RETOKENIZED,
        semconv.RETOKENIZED_EXACT,
        semconv.RETOKENIZED_MISMATCH,
        semconv.RETOKENIZED_REASONS,
    }
)
"""What retokenizing an imported call derives from its record."""


def _recheck_imported(
    report: IntegrityReport, rollout_id: str, spans: Sequence[Span], retokenizer: TemplateRetokenizer | None
) -> None:
    """Retokenize each imported call again from its record, by the one decision of exactness training and export
    use (:func:`relight.otlp.imported_calls.retokenize_call`), and compare with what the store holds."""
    for span in spans:
        if span.kind is not SpanKind.LLM or span.status_code == "ERROR":
            continue
        where = f"{rollout_id}/{span.attempt_id}/{span.span_id}"
        if retokenizer is None:
            report.add("imported_not_rechecked", where)
            continue
        bare = span.model_copy(update={"attributes": {k: v for k, v in span.attributes.items() if k not in _DERIVED}})
        again = retokenize_call(bare, retokenizer, rollout_spans=spans)
        if not again.prompt_ids:
            report.add("imported_not_retokenizable", f"{where}: {again.mismatch}")
            continue
        report.imported_calls_rechecked += 1
        stored = span.attributes
        if semconv.RETOKENIZED_EXACT in stored and (stored[semconv.RETOKENIZED_EXACT] is True) != again.exact:
            report.add(
                "exactness_mark_wrong", f"{where}: marked exact={stored[semconv.RETOKENIZED_EXACT]}, is {again.exact}"
            )
        elif semconv.PROMPT_TOKEN_IDS in stored and (
            stored[semconv.PROMPT_TOKEN_IDS] != again.prompt_ids
            or stored.get(semconv.RESPONSE_TOKEN_IDS) != again.response_ids
        ):
            report.add("exactness_mark_wrong", f"{where}: its stored token ids differ from its record's")
        if not again.exact:
            report.add("imported_inexact", f"{where}: {again.mismatch}")


def _token_ids(value: JsonValue | None) -> bool:
    return isinstance(value, list) and all(type(item) is int and item >= 0 for item in value)


def _aligned(logprobs: JsonValue, length: int) -> bool:
    if not isinstance(logprobs, list) or len(logprobs) != length:
        return False
    return all(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value <= 1e-6
        for value in logprobs
    )


def _shape(value: JsonValue | None) -> str:
    if isinstance(value, list):
        items: list[object] = list(value)
        kinds = sorted({type(item).__name__ for item in items})
        return f"{len(value)} item(s) ({', '.join(kinds) or 'none'})"
    return type(value).__name__ if value is not None else "missing"


def _number(value: JsonValue | None) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
