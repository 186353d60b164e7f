"""Foreign GenAI spans into relight's store: one rollout per trace (or per session), every attribute kept.

Each span is stored with all of its original attributes, its resource's (``relight.otlp.resource``),
its instrumentation scope (``relight.otlp.scope``) and its events (``relight.otlp.events``). An LLM
call, in whichever dialect (:mod:`relight.otlp.dialects`), also gets what relight's gateway would have
recorded: ``relight.span.kind = llm`` and the call's messages as OpenAI chat messages in
``gen_ai.input.messages``/``gen_ai.output.messages`` (an original value that differs is kept under
``relight.original.<name>``), and ``relight.import.missing`` lists what the trace could not say:
``token_ids``, ``logprobs`` and ``policy_version`` always (nothing outside relight records them),
the messages or the response id when absent. A tool span gets ``relight.span.kind = tool``.

A reward is taken only from the trace: a span attribute or span event the user names becomes a
reward span (kind ``reward``) beside the span that held it, so credit assignment reads it like a
reward the agent returned. Without one, the rollout has no reward until :func:`add_reward` gives it one.

Rollouts are recorded as work that ran elsewhere (:meth:`relight.store.Store.record_rollouts`):
each is stored running under the worker ``relight-otlp``, never queued, its spans added and its
attempt then finished as succeeded. So traces can go into any store, the one a training run uses
included, while runners claim exactly the rollouts queued for them. Spans of a trace that arrive in
a later export join the rollout their trace already formed; a trace whose rollout id is taken by a
rollout the importer did not make is refused (:class:`TraceConflictError`).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue, ValidationError

from relight import semconv
from relight.errors import InvalidStateError, NotFoundError
from relight.otlp.decode import ForeignSpan, OtlpBodyError
from relight.otlp.dialects import call_text, is_llm_call, is_tool_call
from relight.records import AttemptStatus, Mode, RolloutRequest, Span, SpanKind
from relight.store import Store

__all__ = [
    "IMPORT_WORKER",
    "ImportOptions",
    "ImportResult",
    "TraceConflictError",
    "TraceImporter",
    "add_reward",
    "map_spans",
]

IMPORT_WORKER = "relight-otlp"
"""The worker id the importer records its rollouts' attempts under."""
SOURCE = "otlp"
"""``metadata["source"]`` of an imported rollout."""
MISSING = semconv.IMPORT_MISSING
DIALECT = semconv.IMPORT_DIALECT
RESOURCE = "relight.otlp.resource"
SCOPE = "relight.otlp.scope"
EVENTS = "relight.otlp.events"
ORIGINAL = "relight.original."
_PENDING = "pending"
_REMEMBERED_TRACES = 100_000


class TraceConflictError(InvalidStateError):
    """A trace's rollout id (``otlp-<trace id>``, ``otlp-session-<value>``) is taken by a rollout the importer
    did not make, so its spans would land in someone else's rollout."""


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """How traces become rollouts.

    Args:
        session_attribute: group the spans of every trace that carries this attribute (on a span or
            its resource, e.g. ``session.id``) into one rollout per value; traces without it form a
            rollout each.
        group_attribute: the attribute naming the task, so rollouts of one task form a GRPO group.
        reward_attribute: a span attribute holding the rollout's reward (a number).
        reward_event: a span event name whose ``reward_event_attribute`` holds a reward (user feedback).
        reward_event_attribute: the attribute of ``reward_event`` read as the value.
        mode: the mode imported rollouts get.
    """

    session_attribute: str | None = None
    group_attribute: str | None = None
    reward_attribute: str | None = None
    reward_event: str | None = None
    reward_event_attribute: str = "score"
    mode: Mode = Mode.TRAIN


@dataclass(slots=True)
class ImportResult:
    """What one export request did to the store."""

    spans: int = 0
    new_rollouts: list[str] = field(default_factory=list[str])
    rejected_spans: int = 0
    """Spans of traces that held no LLM call (and joined no earlier one): not stored."""


@dataclass(slots=True)
class _Group:
    rollout_id: str
    group_id: str | None
    trace_ids: list[str]
    spans: list[Span]

    @property
    def has_llm_call(self) -> bool:
        return any(span.kind is SpanKind.LLM for span in self.spans)


def map_spans(foreign: Sequence[ForeignSpan], options: ImportOptions) -> list[_Group]:
    """Spans grouped into rollouts and mapped to relight's attributes, before any store is touched.

    Raises:
        OtlpBodyError: a span's attributes cannot be stored (the message names the span).
    """
    sessions: dict[str, str] = {}
    if options.session_attribute:
        for span in foreign:
            value = span.attributes.get(options.session_attribute, span.resource.get(options.session_attribute))
            if value is not None and span.trace_id not in sessions:
                sessions[span.trace_id] = str(value)
    groups: dict[str, _Group] = {}
    for span in foreign:
        session = sessions.get(span.trace_id)
        rollout_id = f"otlp-session-{session}" if session is not None else f"otlp-{span.trace_id}"
        group = groups.setdefault(rollout_id, _Group(rollout_id, None, [], []))
        if span.trace_id not in group.trace_ids:
            group.trace_ids.append(span.trace_id)
        if options.group_attribute and group.group_id is None:
            value = span.attributes.get(options.group_attribute, span.resource.get(options.group_attribute))
            group.group_id = str(value) if value is not None else None
        try:
            group.spans += _relight_spans(rollout_id, span, options)
        except ValidationError as error:
            raise OtlpBodyError(f"span {span.span_id} of trace {span.trace_id} cannot be stored: {error}") from None
    return list(groups.values())


def _relight_spans(rollout_id: str, span: ForeignSpan, options: ImportOptions) -> list[Span]:
    attributes: dict[str, JsonValue] = dict(span.attributes)
    attributes[semconv.ROLLOUT_ID] = rollout_id
    if span.resource:
        attributes[RESOURCE] = span.resource
    if span.scope:
        attributes[SCOPE] = span.scope
    if span.events:
        attributes[EVENTS] = [{"name": e.name, "time": e.time, "attributes": dict(e.attributes)} for e in span.events]
    if is_llm_call(span.attributes):
        _add_llm_attributes(attributes, span)
    elif is_tool_call(span.attributes):
        attributes[semconv.SPAN_KIND] = SpanKind.TOOL.value
        attributes[semconv.TOOL_SUCCESS] = span.status_code != "ERROR"
    stored = [
        Span(
            rollout_id=rollout_id,
            attempt_id=_PENDING,
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_id=span.parent_id,
            name=span.name,
            start_time=span.start_time,
            end_time=span.end_time,
            attributes=attributes,
            status_code=span.status_code,
            status_message=span.status_message,
        )
    ]
    for number, (value, time, name) in enumerate(_rewards(span, options)):
        stored.append(
            Span(
                rollout_id=rollout_id,
                attempt_id=_PENDING,
                trace_id=span.trace_id,
                span_id=f"{span.span_id}-reward-{number}",
                parent_id=span.span_id,
                name="reward",
                start_time=time,
                end_time=time,
                attributes={
                    semconv.SPAN_KIND: SpanKind.REWARD.value,
                    semconv.REWARD: value,
                    semconv.REWARD_NAME: name,
                    semconv.ROLLOUT_ID: rollout_id,
                },
            )
        )
    return stored


def _add_llm_attributes(attributes: dict[str, JsonValue], span: ForeignSpan) -> None:
    text = call_text(span.attributes, span.events)
    missing = ["token_ids", "logprobs", "policy_version"]
    derived: dict[str, JsonValue] = {
        semconv.SPAN_KIND: SpanKind.LLM.value,
        semconv.GEN_AI_OPERATION_NAME: str(span.attributes.get(semconv.GEN_AI_OPERATION_NAME) or "chat"),
        DIALECT: text.dialect,
    }
    if text.input_messages:
        derived[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(text.input_messages)
    else:
        missing.append("input_messages")
    if text.output_messages:
        derived[semconv.GEN_AI_OUTPUT_MESSAGES] = json.dumps(text.output_messages[:1])
    else:
        missing.append("output_messages")
    if text.tools:
        derived[semconv.GEN_AI_TOOL_DEFINITIONS] = json.dumps(text.tools)
    if text.finish_reasons:
        derived[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = list[JsonValue](text.finish_reasons)
    if text.input_tokens is not None:
        derived[semconv.GEN_AI_USAGE_INPUT_TOKENS] = text.input_tokens
    if text.output_tokens is not None:
        derived[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = text.output_tokens
    if text.response_id:
        derived[semconv.GEN_AI_RESPONSE_ID] = text.response_id
    else:  # transitions join a call's role by response id: give every call one, and say it is made up
        derived[semconv.GEN_AI_RESPONSE_ID] = f"otlp-{span.span_id}"
        missing.append("response_id")
    derived[MISSING] = list[JsonValue](missing)
    for key, value in derived.items():
        original = attributes.get(key)
        if original is not None and original != value:
            attributes[ORIGINAL + key] = original
        attributes[key] = value
    if text.model and semconv.GEN_AI_REQUEST_MODEL not in attributes:
        attributes[semconv.GEN_AI_REQUEST_MODEL] = text.model


def _rewards(span: ForeignSpan, options: ImportOptions) -> list[tuple[float, int, str]]:
    """(value, time, name) of each reward the span holds, as the options name them."""
    found: list[tuple[float, int, str]] = []
    if options.reward_attribute:
        value = _number(span.attributes.get(options.reward_attribute))
        if value is not None:
            found.append((value, span.end_time, options.reward_attribute))
    if options.reward_event:
        for event in span.events:
            if event.name == options.reward_event:
                value = _number(event.attributes.get(options.reward_event_attribute))
                if value is not None:
                    found.append((value, event.time, event.name))
    return found


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class TraceImporter:
    """Writes mapped traces into ``store``, one export request at a time, as succeeded rollouts."""

    def __init__(self, store: Store, options: ImportOptions | None = None) -> None:
        self.store = store
        self.options = options or ImportOptions()
        self._lock = asyncio.Lock()
        self._rollout_of_trace: OrderedDict[str, str] = OrderedDict()
        """Traces seen lately, so a trace's later spans join the session rollout its first ones formed."""

    async def add(self, foreign: Sequence[ForeignSpan]) -> ImportResult:
        """Map and store one request's spans; a bad span refuses the whole request before any write.

        Raises:
            OtlpBodyError: a span cannot be stored.
            TraceConflictError: a trace's rollout id is taken by a rollout the importer did not make.
        """
        async with self._lock:
            groups = self._join_known(map_spans(foreign, self.options))
            for last_look in (False, True):
                result = ImportResult()
                existing: dict[str, str] = {}
                new: list[_Group] = []
                for group in groups:
                    attempt_id = await self._existing_attempt(group.rollout_id)
                    if attempt_id is not None:
                        existing[group.rollout_id] = attempt_id
                    elif group.has_llm_call:
                        new.append(group)
                    else:
                        result.rejected_spans += len(group.spans)
                await self._check_no_conflict(groups, existing)
                try:
                    existing |= await self._record(new)
                    break
                except InvalidStateError as error:
                    # Another client of the store (a second receiver) made one of them since the look:
                    # nothing was recorded, and a second look joins the spans to what it made.
                    if last_look:
                        raise TraceConflictError(
                            f"{error}: another client of the store made it while these traces were being imported"
                        ) from error
            spans = [
                span.model_copy(update={"attempt_id": existing[group.rollout_id]})
                for group in groups
                if group.rollout_id in existing
                for span in group.spans
            ]
            if spans:
                await self.store.add_spans(spans)
            await self._finish(new, existing)
            for group in groups:
                if group.rollout_id in existing:
                    self._remember(group)
            result.spans = len(spans)
            result.new_rollouts = [group.rollout_id for group in new]
            return result

    async def _check_no_conflict(self, groups: Sequence[_Group], existing: Mapping[str, str]) -> None:
        """Refuse, before any write, a span whose id is already taken by a different span (in this request or stored).

        An exporter that sends a span again (a retry) sends the same span, which is stored once.
        """
        for group in groups:
            seen: dict[str, Span] = {}
            if group.rollout_id in existing:
                stored = await self.store.query_spans(group.rollout_id, existing[group.rollout_id])
                seen = {
                    span.span_id: span.model_copy(update={"sequence_id": None, "attempt_id": _PENDING})
                    for span in stored
                }
            for span in group.spans:
                earlier = seen.setdefault(span.span_id, span)
                if earlier != span:
                    raise OtlpBodyError(
                        f"span {span.span_id} of trace {span.trace_id} was already received with different content; "
                        "span ids must be unique within a trace"
                    )

    def _join_known(self, groups: list[_Group]) -> list[_Group]:
        """A trace already known to belong to a session rollout goes there, though this batch lacks the attribute."""
        merged: dict[str, _Group] = {}
        for group in groups:
            known = {self._rollout_of_trace.get(trace_id) for trace_id in group.trace_ids} - {None}
            by_trace = not group.rollout_id.startswith("otlp-session-")
            rollout_id = known.pop() if len(known) == 1 and by_trace else group.rollout_id
            assert rollout_id is not None
            if rollout_id != group.rollout_id:
                group.spans = [
                    s.model_copy(
                        update={
                            "rollout_id": rollout_id,
                            "attributes": {**s.attributes, semconv.ROLLOUT_ID: rollout_id},
                        }
                    )
                    for s in group.spans
                ]
            target = merged.setdefault(rollout_id, _Group(rollout_id, group.group_id, [], []))
            target.trace_ids += [t for t in group.trace_ids if t not in target.trace_ids]
            target.spans += group.spans
        return list(merged.values())

    def _remember(self, group: _Group) -> None:
        for trace_id in group.trace_ids:
            self._rollout_of_trace[trace_id] = group.rollout_id
            self._rollout_of_trace.move_to_end(trace_id)
        while len(self._rollout_of_trace) > _REMEMBERED_TRACES:
            self._rollout_of_trace.popitem(last=False)

    async def _existing_attempt(self, rollout_id: str) -> str | None:
        """The attempt of the imported rollout ``rollout_id`` that later spans join; None when there is no such rollout.

        Raises:
            TraceConflictError: the id is taken by a rollout the importer did not make.
        """
        try:
            rollout = await self.store.get_rollout(rollout_id)
        except NotFoundError:
            return None
        attempts = await self.store.list_attempts(rollout_id)
        if rollout.metadata.get("source") != SOURCE or not attempts:
            raise _taken(rollout_id)
        return attempts[-1].attempt_id

    async def _record(self, groups: Sequence[_Group]) -> dict[str, str]:
        """Record the new rollouts as run by the importer, never queued: their attempts, by rollout id.

        Raises:
            InvalidStateError: one of them exists already; nothing was recorded.
        """
        if not groups:
            return {}
        requests = [
            RolloutRequest(
                rollout_id=group.rollout_id,
                input={"trace_ids": list[JsonValue](group.trace_ids)},
                mode=self.options.mode,
                group_id=group.group_id,
                max_attempts=1,
                metadata={"source": SOURCE, "trace_ids": list[JsonValue](group.trace_ids)},
            )
            for group in groups
        ]
        recorded = await self.store.record_rollouts(requests, worker_id=IMPORT_WORKER)
        return {rollout.rollout_id: attempt.attempt_id for rollout, attempt in recorded}

    async def _finish(self, groups: Sequence[_Group], attempts: dict[str, str]) -> None:
        for group in groups:
            await self.store.finish_attempt(group.rollout_id, attempts[group.rollout_id], AttemptStatus.SUCCEEDED)


def _taken(rollout_id: str) -> TraceConflictError:
    return TraceConflictError(
        f"rollout {rollout_id!r} already exists and was not imported from traces (its metadata has no "
        f"source={SOURCE!r} or it has no attempt): its spans are not added to it. Remove that rollout, or "
        "import into another store"
    )


async def add_reward(store: Store, rollout_id: str, value: float, *, name: str = "reward") -> Span:
    """Give an imported rollout a reward after the fact (a reward function's or a judge's verdict).

    The reward span is stored at the end of the rollout's last attempt, so every credit assigner reads
    it as the episode's final reward; transitions built afterwards carry it.
    """
    attempts = await store.list_attempts(rollout_id)
    if not attempts:
        raise NotFoundError(f"rollout {rollout_id!r} has no attempt to reward")
    attempt = attempts[-1]
    spans = await store.query_spans(rollout_id, attempt.attempt_id)
    end = max((span.end_time for span in spans), default=0)
    count = sum(span.kind is SpanKind.REWARD for span in spans)
    reward = Span(
        rollout_id=rollout_id,
        attempt_id=attempt.attempt_id,
        span_id=f"{rollout_id}-added-reward-{count}",
        trace_id=spans[0].trace_id if spans else rollout_id,
        name="reward",
        start_time=end,
        end_time=end,
        attributes={
            semconv.SPAN_KIND: SpanKind.REWARD.value,
            semconv.REWARD: float(value),
            semconv.REWARD_NAME: name,
            semconv.ROLLOUT_ID: rollout_id,
        },
    )
    await store.add_spans([reward])
    return reward
