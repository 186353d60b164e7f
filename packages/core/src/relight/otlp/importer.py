"""Foreign GenAI spans and events into relight's store: one rollout per trace (or per session), nothing dropped.

Each span is stored with all of its original attributes, its resource's (``relight.otlp.resource``),
its instrumentation scope (``relight.otlp.scope``) and its events (``relight.otlp.events``). An LLM
call, in whichever dialect, also gets what relight's gateway would have recorded, and says what the
trace could not (:mod:`relight.otlp.call_record`). A tool span gets ``relight.span.kind = tool``.

GenAI events sent as OTLP log records (``/v1/logs``: the conventions' per-message events, or one
``gen_ai.client.inference.operation.details`` per call) are stored beside the spans of their trace, each
as a span named after its event whose parent is the span it was emitted in. They are joined to their
call when the call is read (:func:`relight.otlp.imported_calls.prepare_spans`), whichever arrived first.

A trace's rollout forms when its first span or event arrives. Until its first LLM call it is
*waiting*: running under the worker ``relight-otlp`` (never queued, so no runner claims it), its spans
kept in the store; the call ends it succeeded. So spans that end before the first model call (a
retriever, a tool), or come in another export than the rest of their trace, are never lost, a
restart of the receiver included. A trace whose spans name a session (``session_attribute``) joins the
session's rollout; a waiting rollout of that trace moves there (its spans copied, itself cancelled,
its metadata's ``moved_to`` naming the session's rollout), and the session's metadata lists every
trace it gathered. A trace whose rollout id is taken by a rollout the importer did not make is
refused (:class:`TraceConflictError`).

A reward is taken only from the trace: a span attribute or span event the user names becomes a
reward span (kind ``reward``) beside the span that held it, so credit assignment reads it like a
reward the agent returned. Without one, the rollout has no reward until :func:`add_reward` gives it one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import JsonValue, ValidationError

from relight import semconv
from relight.errors import InvalidStateError, NotFoundError
from relight.otlp.call_record import EVENTS, LOG_BODY, LOG_EVENT, ORIGINAL, RESOURCE, SCOPE, derive_call
from relight.otlp.decode import ForeignLog, ForeignSpan, OtlpBodyError
from relight.otlp.dialects import is_llm_call, is_tool_call
from relight.records import AttemptStatus, Mode, Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.store import MAX_LEASE_SECONDS, Store

__all__ = [
    "IMPORT_WORKER",
    "MOVED_TO",
    "ImportOptions",
    "ImportResult",
    "ImportStats",
    "Refusal",
    "TraceConflictError",
    "TraceImporter",
    "add_reward",
    "session_rollout_id",
    "trace_rollout_id",
]

logger = logging.getLogger(__name__)

IMPORT_WORKER = "relight-otlp"
"""The worker id the importer records its rollouts' attempts under."""
SOURCE = "otlp"
"""``metadata["source"]`` of an imported rollout."""
MOVED_TO = "moved_to"
"""``metadata`` key of a waiting trace rollout whose spans moved to its session's rollout: that rollout's id."""
_PENDING = "pending"
_SESSION_PREFIX = "otlp-session-"


def trace_rollout_id(trace_id: str) -> str:
    return f"otlp-{trace_id}"


def session_rollout_id(session: str) -> str:
    return f"{_SESSION_PREFIX}{session}"


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


@dataclass(frozen=True, slots=True)
class Refusal:
    """Something an export held that was not stored, and why."""

    what: str
    reason: str


@dataclass(slots=True)
class ImportResult:
    """What one export request did to the store."""

    spans: int = 0
    log_records: int = 0
    new_rollouts: list[str] = field(default_factory=list[str])
    refused: list[Refusal] = field(default_factory=list[Refusal])

    def summary(self) -> str:
        """The refusals in one line, for OTLP's ``partialSuccess.errorMessage``: each reason with its count and
        first examples."""
        by_reason: dict[str, list[str]] = {}
        for refusal in self.refused:
            by_reason.setdefault(refusal.reason, []).append(refusal.what)
        return "; ".join(
            f"{len(whats)} {reason} (" + ", ".join(whats[:3]) + (", …" if len(whats) > 3 else "") + ")"
            for reason, whats in by_reason.items()
        )


@dataclass(slots=True)
class ImportStats:
    """What the importer did since it started, for the receiver's log and ``/stats``."""

    spans: int = 0
    log_records: int = 0
    rollouts: int = 0
    """Rollouts formed (a trace's or a session's)."""
    moved: int = 0
    """Waiting trace rollouts whose spans moved to their session's rollout."""
    sessions_named_late: int = 0
    """Traces whose spans named a session after the trace had formed a rollout of its own with an LLM call:
    they stay in the trace's rollout."""
    refused: Counter[str] = field(default_factory=Counter[str])
    """Log records (or spans) of accepted exports not stored, by reason."""
    refused_exports: Counter[str] = field(default_factory=Counter[str])
    """Exports refused whole (nothing of them stored), by HTTP status."""
    metric_points: int = 0
    """Metric data points received (answered, counted, not kept: relight trains on traces)."""

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "spans": self.spans,
            "log_records": self.log_records,
            "rollouts": self.rollouts,
            "moved": self.moved,
            "sessions_named_late": self.sessions_named_late,
            "refused": dict[str, JsonValue](self.refused),
            "refused_exports": dict[str, JsonValue](self.refused_exports),
            "metric_points": self.metric_points,
        }


@dataclass(slots=True)
class _Trace:
    """One trace's part of an export, before it is given a rollout."""

    trace_id: str
    session: str | None = None
    group_id: str | None = None
    spans: list[Span] = field(default_factory=list[Span])

    @property
    def has_llm_call(self) -> bool:
        return any(span.kind is SpanKind.LLM for span in self.spans)


@dataclass(slots=True)
class _Target:
    """What an export adds to one rollout."""

    rollout_id: str
    traces: list[_Trace] = field(default_factory=list[_Trace])
    moves: list[str] = field(default_factory=list[str])
    """Waiting trace rollouts whose spans move here."""
    rollout: Rollout | None = None
    attempt_id: str | None = None
    new: bool = False

    @property
    def spans(self) -> list[Span]:
        return [span for trace in self.traces for span in trace.spans]

    @property
    def has_llm_call(self) -> bool:
        return any(trace.has_llm_call for trace in self.traces)

    @property
    def group_id(self) -> str | None:
        return next((trace.group_id for trace in self.traces if trace.group_id is not None), None)


class TraceImporter:
    """Writes exported spans and events into ``store``, one export request at a time."""

    def __init__(self, store: Store, options: ImportOptions | None = None) -> None:
        self.store = store
        self.options = options or ImportOptions()
        self.stats = ImportStats()
        self._lock = asyncio.Lock()
        self._session_of_trace: dict[str, str] = {}
        """The session rollout each trace joined, as the store's session rollouts list them (read once, then kept)."""
        self._sessions_read = False

    async def add(self, foreign: Sequence[ForeignSpan]) -> ImportResult:
        """Map and store one request's spans; a bad span refuses the whole request before any write.

        Raises:
            OtlpBodyError: a span cannot be stored, or was already received with different content.
            TraceConflictError: a trace's rollout id is taken by a rollout the importer did not make.
        """
        traces = self._traces_of_spans(foreign)
        async with self._lock:
            result = await self._store(traces)
        result.spans = sum(len(t.spans) for t in traces)
        self.stats.spans += result.spans
        return result

    async def add_logs(self, records: Sequence[ForeignLog]) -> ImportResult:
        """Store one request's GenAI events beside the spans of their traces; any other log record is refused,
        named, and counted (it belongs to no call, or is no GenAI event).

        Raises:
            OtlpBodyError: a record cannot be stored, or was already received with different content.
            TraceConflictError: a trace's rollout id is taken by a rollout the importer did not make.
        """
        refused: list[Refusal] = []
        traces: dict[str, _Trace] = {}
        for record in records:
            if record.trace_id is None or record.span_id is None:
                refused.append(Refusal(f"log record {record.where}", "log record(s) without a trace and span id"))
            elif not record.event_name.startswith("gen_ai."):
                refused.append(
                    Refusal(
                        f"log record {record.where} ({record.event_name or 'no event name'})",
                        "log record(s) that are no GenAI event (relight keeps gen_ai.* events)",
                    )
                )
            else:
                trace = traces.setdefault(record.trace_id, _Trace(record.trace_id))
                trace.session = trace.session or self._session_of(record.attributes, record.resource)
                trace.spans.append(_log_span(record))
        async with self._lock:
            result = await self._store(list(traces.values()))
        result.log_records = sum(len(t.spans) for t in traces.values())
        result.refused += refused
        self.stats.log_records += result.log_records
        self.stats.refused.update(refusal.reason for refusal in refused)
        if refused:
            logger.warning("relight: OTLP log records not stored: %s", result.summary())
        return result

    # -- from an export to traces ---------------------------------------------------------------------

    def _traces_of_spans(self, foreign: Sequence[ForeignSpan]) -> list[_Trace]:
        traces: dict[str, _Trace] = {}
        for span in foreign:
            trace = traces.setdefault(span.trace_id, _Trace(span.trace_id))
            trace.session = trace.session or self._session_of(span.attributes, span.resource)
            if self.options.group_attribute and trace.group_id is None:
                value = span.attributes.get(
                    self.options.group_attribute, span.resource.get(self.options.group_attribute)
                )
                trace.group_id = str(value) if value is not None else None
            try:
                trace.spans += _relight_spans(span, self.options)
            except ValidationError as error:
                raise OtlpBodyError(f"span {span.span_id} of trace {span.trace_id} cannot be stored: {error}") from None
        return list(traces.values())

    def _session_of(self, attributes: Mapping[str, JsonValue], resource: Mapping[str, JsonValue]) -> str | None:
        name = self.options.session_attribute
        if not name:
            return None
        value = attributes.get(name, resource.get(name))
        return str(value) if value is not None else None

    # -- from traces to rollouts ----------------------------------------------------------------------

    async def _store(self, traces: Sequence[_Trace]) -> ImportResult:
        result = ImportResult()
        if not traces:
            return result
        for last_look in (False, True):
            targets = await self._targets(traces)
            for target in targets.values():
                await self._check_no_conflict(target)
            try:
                await self._record([t for t in targets.values() if t.rollout is None])
                break
            except InvalidStateError as error:
                # Another client of the store (a second receiver) made one of them since the look:
                # nothing was recorded, and a second look joins the spans to what it made.
                if last_look:
                    raise TraceConflictError(
                        f"{error}: another client of the store made it while these traces were being imported"
                    ) from error
        for target in targets.values():
            await self._write(target, result)
        return result

    async def _targets(self, traces: Sequence[_Trace]) -> dict[str, _Target]:
        """Each trace's rollout (existing or to record), and the waiting trace rollouts that move into a session's."""
        targets: dict[str, _Target] = {}
        for trace in traces:
            placed = await self._look_up(trace.trace_id)
            rollout_id = placed or trace_rollout_id(trace.trace_id)
            move: str | None = None
            own = trace_rollout_id(trace.trace_id)
            if trace.session is not None and placed is None:
                rollout_id = session_rollout_id(trace.session)
            elif trace.session is not None and placed == own:
                if await self._waiting(own):
                    rollout_id, move = session_rollout_id(trace.session), own
                else:
                    self.stats.sessions_named_late += 1
                    logger.warning(
                        "relight: trace %s names session %r after its rollout %s formed with an LLM call; its spans "
                        "stay there (put the session attribute on the trace's first exported spans)",
                        trace.trace_id,
                        trace.session,
                        placed,
                    )
            target = targets.setdefault(rollout_id, _Target(rollout_id))
            target.traces.append(trace)
            if move is not None and move not in target.moves:
                target.moves.append(move)
        for target in targets.values():
            found = await self._existing(target.rollout_id)
            if found is not None:
                target.rollout, target.attempt_id = found
        return targets

    async def _look_up(self, trace_id: str) -> str | None:
        """The rollout the store holds a trace in (a session's, or its own, following a move); None for a new trace."""
        if trace_id in self._session_of_trace:
            return self._session_of_trace[trace_id]
        rollout_id = trace_rollout_id(trace_id)
        try:
            rollout = await self.store.get_rollout(rollout_id)
        except NotFoundError:
            if self.options.session_attribute and not self._sessions_read:
                await self._read_sessions()
            return self._session_of_trace.get(trace_id)
        moved = rollout.metadata.get(MOVED_TO)
        return moved if isinstance(moved, str) and moved else rollout_id

    async def _read_sessions(self) -> None:
        """Learn, once, which traces the store's session rollouts hold (their metadata lists every one)."""
        if self._sessions_read:
            return
        self._sessions_read = True
        for rollout in await self.store.list_rollouts():
            if rollout.rollout_id.startswith(_SESSION_PREFIX) and rollout.metadata.get("source") == SOURCE:
                for trace_id in _trace_ids(rollout):
                    self._session_of_trace.setdefault(trace_id, rollout.rollout_id)

    async def _waiting(self, rollout_id: str) -> bool:
        """Whether an imported rollout still waits for its first LLM call."""
        try:
            rollout = await self.store.get_rollout(rollout_id)
        except NotFoundError:
            return False
        return rollout.status is RolloutStatus.RUNNING and rollout.metadata.get("source") == SOURCE

    async def _existing(self, rollout_id: str) -> tuple[Rollout, str] | None:
        """The imported rollout ``rollout_id`` and its attempt; None when there is no such rollout.

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
        return rollout, attempts[-1].attempt_id

    async def _check_no_conflict(self, target: _Target) -> None:
        """Refuse, before any write, a span whose id is already taken by a different span (in this request or stored).

        An exporter that sends a span again (a retry) sends the same span, which is stored once.
        """
        seen: dict[str, Span] = {}
        if target.rollout is not None:
            stored = await self.store.query_spans(target.rollout_id, target.attempt_id)
            seen = {span.span_id: _comparable(span) for span in stored}
        for span in target.spans:
            earlier = seen.setdefault(span.span_id, _comparable(span))
            if earlier != _comparable(span):
                raise OtlpBodyError(
                    f"span {span.span_id} of trace {span.trace_id} was already received with different content; "
                    "span ids must be unique within a trace"
                )

    async def _record(self, targets: Sequence[_Target]) -> None:
        """Record the new rollouts as run by the importer, never queued.

        Raises:
            InvalidStateError: one of them exists already; nothing was recorded.
        """
        if not targets:
            return
        requests = [
            RolloutRequest(
                rollout_id=target.rollout_id,
                input={"trace_ids": list[JsonValue](_ids(target))},
                mode=self.options.mode,
                group_id=target.group_id,
                max_attempts=1,
                metadata={"source": SOURCE, "trace_ids": list[JsonValue](_ids(target))},
            )
            for target in targets
        ]
        recorded = await self.store.record_rollouts(requests, worker_id=IMPORT_WORKER, lease_seconds=MAX_LEASE_SECONDS)
        for target, (rollout, attempt) in zip(targets, recorded, strict=True):
            target.rollout, target.attempt_id, target.new = rollout, attempt.attempt_id, True
        self.stats.rollouts += len(recorded)

    async def _write(self, target: _Target, result: ImportResult) -> None:
        """Add the target's spans (and those of the waiting rollouts that move in), end a wait that an LLM call
        ends, and list every trace the rollout gathered."""
        rollout, attempt_id = target.rollout, target.attempt_id
        assert rollout is not None
        assert attempt_id is not None
        spans = [_placed(span, target.rollout_id, attempt_id) for span in target.spans]
        moved_traces: list[str] = []
        for source in target.moves:
            moved = await self.store.query_spans(source)
            spans = [_placed(span, target.rollout_id, attempt_id) for span in moved] + spans
            moved_traces += [span.trace_id for span in moved]
        if spans:
            await self.store.add_spans(spans)
        for source in target.moves:
            await self.store.cancel([source])
            await self.store.update_metadata(source, {MOVED_TO: target.rollout_id})
            self.stats.moved += 1
        if target.has_llm_call and rollout.status is RolloutStatus.RUNNING:
            await self.store.finish_attempt(target.rollout_id, attempt_id, AttemptStatus.SUCCEEDED)
        elif target.has_llm_call and rollout.status is not RolloutStatus.SUCCEEDED:
            logger.warning(
                "relight: an LLM call of trace(s) %s joined rollout %s, which ended %s; it is kept, never trained",
                ", ".join(_ids(target)),
                target.rollout_id,
                rollout.status.value,
            )
        listed = _trace_ids(rollout)
        gathered = list(dict.fromkeys([*listed, *moved_traces, *_ids(target)]))
        if gathered != listed:
            await self.store.update_metadata(target.rollout_id, {"trace_ids": list[JsonValue](gathered)})
        if target.rollout_id.startswith(_SESSION_PREFIX):
            self._session_of_trace.update(dict.fromkeys(gathered, target.rollout_id))
        if target.new:
            result.new_rollouts.append(target.rollout_id)


def _ids(target: _Target) -> list[str]:
    return [trace.trace_id for trace in target.traces]


def _trace_ids(rollout: Rollout) -> list[str]:
    listed = rollout.metadata.get("trace_ids")
    return [str(t) for t in listed] if isinstance(listed, list) else []


def _comparable(span: Span) -> Span:
    """A span as two deliveries of it compare: where and when it was stored left out."""
    return span.model_copy(
        update={
            "sequence_id": None,
            "rollout_id": _PENDING,
            "attempt_id": _PENDING,
            "attributes": {k: v for k, v in span.attributes.items() if k != semconv.ROLLOUT_ID},
        }
    )


def _placed(span: Span, rollout_id: str, attempt_id: str) -> Span:
    return span.model_copy(
        update={
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "sequence_id": None,
            "attributes": {**span.attributes, semconv.ROLLOUT_ID: rollout_id},
        }
    )


# -- one foreign span or log record as relight spans ---------------------------------------------------------


def _relight_spans(span: ForeignSpan, options: ImportOptions) -> list[Span]:
    attributes: dict[str, JsonValue] = dict(span.attributes)
    if span.resource:
        attributes[RESOURCE] = span.resource
    if span.scope:
        attributes[SCOPE] = span.scope
    if span.events:
        attributes[EVENTS] = [{"name": e.name, "time": e.time, "attributes": dict(e.attributes)} for e in span.events]
    if is_llm_call(span.attributes):
        for key, value in derive_call(span.attributes, span.events, span.span_id).items():
            original = attributes.get(key)
            if original is not None and original != value:
                attributes[ORIGINAL + key] = original
            attributes[key] = value
    elif is_tool_call(span.attributes):
        attributes[semconv.SPAN_KIND] = SpanKind.TOOL.value
        attributes[semconv.TOOL_SUCCESS] = span.status_code != "ERROR"
    stored = [
        Span(
            rollout_id=_PENDING,
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
                rollout_id=_PENDING,
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
                },
            )
        )
    return stored


def _log_span(record: ForeignLog) -> Span:
    """A log record kept as a span under the span it was emitted in; the same record always gets the same id."""
    assert record.trace_id is not None
    assert record.span_id is not None
    digest = hashlib.sha256(
        orjson.dumps([record.time, record.event_name, record.body, record.attributes], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()[:16]
    attributes: dict[str, JsonValue] = {**record.attributes, LOG_EVENT: record.event_name, LOG_BODY: record.body}
    if record.resource:
        attributes[RESOURCE] = record.resource
    if record.scope:
        attributes[SCOPE] = record.scope
    try:
        return Span(
            rollout_id=_PENDING,
            attempt_id=_PENDING,
            trace_id=record.trace_id,
            span_id=f"{record.span_id}-log-{digest}",
            parent_id=record.span_id,
            name=record.event_name,
            start_time=record.time,
            end_time=record.time,
            attributes=attributes,
        )
    except ValidationError as error:
        raise OtlpBodyError(f"log record {record.where} cannot be stored: {error}") from None


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
