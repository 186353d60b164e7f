"""The data model shared by every part of relight: rollouts, attempts, spans, resources, transitions.

These are the records the store keeps and the HTTP store sends, so they validate on the way in:
a bad value fails with a pydantic ``ValidationError`` that names the field (``reward``,
``response_token_ids.3``) rather than corrupting what is stored. Models are frozen; change one
with ``model_copy(update=...)``.
"""

from __future__ import annotations

import math
import time
import uuid
from enum import StrEnum
from types import NoneType
from typing import Annotated, Any, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    JsonValue,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

__all__ = [
    "DEV_MODE",
    "TERMINAL_ATTEMPT_STATUSES",
    "TERMINAL_ROLLOUT_STATUSES",
    "Attempt",
    "AttemptStatus",
    "Mode",
    "Resources",
    "Rollout",
    "RolloutRequest",
    "RolloutStatus",
    "Span",
    "SpanKind",
    "StoreStats",
    "Transition",
    "new_id",
]

DEV_MODE = "dev_mode"
"""The metadata key, true, of a rollout dev mode ran (:meth:`relight.Trainer.dev`): it checks the wiring and is
never trained, whatever store it is kept in."""

TokenId = Annotated[int, Field(ge=0)]
"""A vocabulary index: never negative."""


def new_id(prefix: str) -> str:
    """A short random id with a readable prefix (``ro-3f2a…``), unique enough across machines."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


_PLAIN_SCALARS = frozenset({str, int, float, bool, NoneType})


def _is_plain_json(value: object) -> bool:
    """Built of exactly str, int, float, bool and None, in lists and str-keyed dicts: a cheap type scan."""
    kind = type(value)
    if kind is list:
        items = cast(list[object], value)
        return set(map(type, items)) <= _PLAIN_SCALARS or all(map(_is_plain_json, items))
    if kind is dict:
        entries = cast(dict[object, object], value)
        return all(type(key) is str for key in entries) and all(map(_is_plain_json, entries.values()))
    return kind in _PLAIN_SCALARS


class _PlainJsonFirst:
    """Validation of a JSON object field that takes plain JSON from Python after a quick type scan.

    pydantic's recursive ``JsonValue`` validation costs ~30 µs for a span's ~2 KB of attributes, and
    the gateway and tracing build a span per call. Plain JSON (all that relight's own spans hold) passes
    the scan in a few µs and is kept, its top-level dict copied; anything else, such as a tuple or an
    object, still goes through pydantic, which refuses it naming the key. JSON input skips both, as
    pydantic's ``JsonValue`` does: parsed JSON is plain JSON.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        validated = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=validated, python_schema=core_schema.no_info_wrap_validator_function(_plain_first, validated)
        )


def _plain_first(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    if _is_plain_json(value) and type(value) is dict:
        return cast(dict[str, JsonValue], value).copy()
    return validate(value)


def _finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return value


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class Mode(StrEnum):
    """Whether a rollout feeds training or only measures the policy."""

    TRAIN = "train"
    VAL = "val"


class RolloutStatus(StrEnum):
    """``queued → running → succeeded | failed | cancelled``; a retried rollout goes back to queued."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    """One try's fate. Every status but ``running`` is final."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    EXPIRED = "expired"
    """Its lease ran out without a heartbeat: the worker died or hung."""
    CANCELLED = "cancelled"


TERMINAL_ROLLOUT_STATUSES = frozenset({RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED})
TERMINAL_ATTEMPT_STATUSES = frozenset(set(AttemptStatus) - {AttemptStatus.RUNNING})


class RolloutRequest(_Record):
    """What a caller asks to be run; the store turns it into a :class:`Rollout`."""

    input: JsonValue
    """The task, handed unchanged to the agent."""
    mode: Mode = Mode.TRAIN
    group_id: str | None = None
    """Rollouts of one task share a group for GRPO; defaults to the rollout's own id."""
    max_attempts: int = Field(default=3, ge=1)
    resources_version: int | None = Field(default=None, ge=0)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    rollout_id: str | None = Field(default=None, min_length=1)
    """Set it to make enqueueing idempotent; otherwise the store makes one."""


class Rollout(_Record):
    """One task run for training or validation, tried up to ``max_attempts`` times."""

    rollout_id: str = Field(min_length=1)
    input: JsonValue
    mode: Mode = Mode.TRAIN
    group_id: str = Field(min_length=1)
    status: RolloutStatus = RolloutStatus.QUEUED
    max_attempts: int = Field(default=3, ge=1)
    attempt_count: int = Field(default=0, ge=0)
    resources_version: int | None = Field(default=None, ge=0)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    error: str | None = None
    """The last attempt's error, kept on the rollout so a failed one explains itself."""

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL_ROLLOUT_STATUSES

    @property
    def from_dev_mode(self) -> bool:
        """Whether dev mode ran it (its metadata's :data:`DEV_MODE`): a validation rollout that is never trained."""
        return self.metadata.get(DEV_MODE) is True


class Attempt(_Record):
    """One try of a rollout by one worker, kept alive by heartbeats until its lease expires."""

    rollout_id: str = Field(min_length=1)
    attempt_id: str = Field(min_length=1)
    number: int = Field(ge=1)
    """1 for the first try, 2 for the first retry, …"""
    worker_id: str = Field(min_length=1)
    status: AttemptStatus = AttemptStatus.RUNNING
    started_at: float = Field(default_factory=time.time)
    lease_expires_at: float
    finished_at: float | None = None
    error: str | None = None
    """A traceback or reason for any status other than succeeded."""

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL_ATTEMPT_STATUSES


class SpanKind(StrEnum):
    """What a span is to relight, stored in its ``relight.span.kind`` attribute."""

    LLM = "llm"
    """A model call recorded by the gateway: token ids and logprobs."""
    ROLE = "role"
    """A framework's record of which agent or node made a model call."""
    TOOL = "tool"
    """A tool run, with its arguments, result or error (bounded in size)."""
    HANDOFF = "handoff"
    """One agent passing control to another (an Agents SDK handoff, a LangGraph edge, an AutoGen handoff)."""
    REWARD = "reward"
    RESCORED = "rescored"
    """A reward a changed reward function gave a finished rollout afterwards (``relight rescore``), named by
    ``relight.reward.name``: kept beside the rewards the rollout earned, never counted in its return."""
    ANNOTATION = "annotation"
    OTHER = "other"


class Span(_Record):
    """An OpenTelemetry span as relight stores it, tied to one rollout attempt.

    ``sequence_id`` is given by the store on arrival (its order within the attempt); a span sent
    twice (same ``span_id``) is stored once, so clients may retry a batch safely.
    """

    rollout_id: str = Field(min_length=1)
    attempt_id: str = Field(min_length=1)
    span_id: str = Field(min_length=1)
    trace_id: str = Field(min_length=1)
    parent_id: str | None = None
    name: str
    start_time: int = Field(ge=0)
    """Nanoseconds since the epoch, as in OpenTelemetry."""
    end_time: int = Field(ge=0)
    attributes: Annotated[dict[str, JsonValue], _PlainJsonFirst] = Field(default_factory=dict)
    status_code: str = "UNSET"
    status_message: str | None = None
    sequence_id: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ends_after_start(self) -> Self:
        if self.end_time < self.start_time:
            raise ValueError(f"end_time ({self.end_time}) must not be before start_time ({self.start_time})")
        return self

    @property
    def kind(self) -> SpanKind:
        value = self.attributes.get("relight.span.kind")
        try:
            return SpanKind(value)
        except ValueError:
            return SpanKind.OTHER


class Resources(_Record):
    """Named things the agent uses (the model to call, prompt templates) under one version.

    The trainer publishes a new version after each update; rollouts record the version they ran with.
    """

    version: int = Field(ge=0)
    items: dict[str, JsonValue]
    created_at: float = Field(default_factory=time.time)


class Transition(_Record):
    """One LLM call made trainable: what the policy saw, what it said, and the credit it earned."""

    rollout_id: str = Field(min_length=1)
    attempt_id: str = Field(min_length=1)
    group_id: str = Field(min_length=1)
    step: int = Field(ge=0)
    """Index of the call within its attempt, in the order the calls were made."""
    role: str | None = None
    policy: str | None = None
    """The policy that trains it, in a run with several policies (``Trainer(policies=...)``); None otherwise."""
    prompt_token_ids: list[TokenId] = Field(min_length=1)
    response_token_ids: list[TokenId]
    response_logprobs: list[float] | None = None
    reward: float
    policy_version: int | None = Field(default=None, ge=0)
    mode: Mode = Mode.TRAIN
    span_id: str | None = None
    """The LLM span the transition came from."""
    retokenized: bool = False
    """True when the upstream gave no token ids and the gateway tokenized the text itself."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("reward")
    @classmethod
    def _reward_is_finite(cls, value: float) -> float:
        return _finite(value, "reward")

    @field_validator("response_logprobs")
    @classmethod
    def _logprobs_are_log_probabilities(cls, value: list[float] | None) -> list[float] | None:
        if value is None:
            return value
        for index, logprob in enumerate(value):
            if math.isnan(logprob) or logprob > 1e-6:
                raise ValueError(f"response_logprobs[{index}] must be a log-probability (<= 0), got {logprob!r}")
        return value

    @model_validator(mode="after")
    def _logprobs_match_tokens(self) -> Self:
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_token_ids):
            raise ValueError(
                f"response_logprobs has {len(self.response_logprobs)} entries but "
                f"response_token_ids has {len(self.response_token_ids)}; they must match"
            )
        return self


class StoreStats(_Record):
    """Counts a store reports about itself, for the CLI and dashboards."""

    rollouts_by_status: dict[str, int]
    attempts_by_status: dict[str, int]
    spans: int
    resources_versions: int
    extra: dict[str, Any] = Field(default_factory=dict)
