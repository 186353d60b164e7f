"""What the HTTP store's server and client say to each other: paths, bodies, replies and errors.

Ids travel in bodies and query strings, never in paths, so a rollout id may hold any character.
An error reply is ``{"error": <exception class>, "detail": <message>}``, which the client raises
again as the same :mod:`relight.errors` class.
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from relight.errors import (
    ConfigError,
    InvalidStateError,
    LeaseLostError,
    NotFoundError,
    RelightError,
    StoreError,
    StoreUnavailableError,
)
from relight.records import Attempt, AttemptStatus, Mode, Rollout, RolloutRequest, Span
from relight.store import DEFAULT_LEASE_SECONDS
from relight.summaries import SummaryFilter

PREFIX: Final = "/v1"
DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
"""The largest request body the server takes; the client splits span batches to stay under it."""
DEFAULT_MAX_POLL_SECONDS: Final = 20.0
"""The longest one long-poll request (claim, wait) is held open; clients ask again after it."""
REQUEST_ID_HEADER: Final = "idempotency-key"
"""Names one logical call of a non-idempotent endpoint (record, claim, finish, publish); its retries carry the same
value, and the server answers a retry with the reply it already gave instead of acting twice."""

ROLLOUTS = TypeAdapter(list[Rollout])
ATTEMPTS = TypeAdapter(list[Attempt])
SPANS = TypeAdapter(list[Span])


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EnqueueBody(_Body):
    requests: list[RolloutRequest]


class RecordBody(_Body):
    requests: list[RolloutRequest]
    worker_id: str = Field(min_length=1)
    lease_seconds: float = DEFAULT_LEASE_SECONDS


class ClaimBody(_Body):
    worker_id: str = Field(min_length=1)
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    timeout: float = Field(default=0.0, ge=0)
    mode: Mode | None = None


class Claimed(_Body):
    rollout: Rollout
    attempt: Attempt


CLAIMED: TypeAdapter[Claimed | None] = TypeAdapter(Claimed | None)
RECORDED = TypeAdapter(list[Claimed])


class HeartbeatBody(_Body):
    rollout_id: str
    attempt_id: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS


class FinishBody(_Body):
    rollout_id: str
    attempt_id: str
    status: AttemptStatus
    error: str | None = None


class CancelBody(_Body):
    rollout_ids: list[str]


class MetadataBody(_Body):
    rollout_id: str
    metadata: dict[str, JsonValue]


class WaitBody(_Body):
    rollout_ids: list[str]
    timeout: float | None = Field(default=None, ge=0)


class PublishBody(_Body):
    items: dict[str, JsonValue]


class SummariesBody(_Body):
    where: SummaryFilter | None = None
    limit: int = Field(default=50, ge=0)
    offset: int = Field(default=0, ge=0)


_STATUS_OF_ERROR: Final[tuple[tuple[type[RelightError], int], ...]] = (
    (NotFoundError, 404),
    (InvalidStateError, 409),  # LeaseLostError too
    (ConfigError, 422),
    (StoreError, 503),
)
_ERROR_CLASSES: Final = {
    cls.__name__: cls
    for cls in (NotFoundError, InvalidStateError, LeaseLostError, ConfigError, StoreError, StoreUnavailableError)
}
_UNAVAILABLE: Final = frozenset({502, 503, 504})
"""Statuses a server (or a proxy in front of it) answers while it is away or restarting."""


def status_of(error: RelightError) -> int:
    """The HTTP status a store error is sent with."""
    return next((status for cls, status in _STATUS_OF_ERROR if isinstance(error, cls)), 500)


def error_body(error: str, detail: str) -> bytes:
    return json.dumps({"error": error, "detail": detail}).encode()


def error_from_reply(status: int, content: bytes, url: str) -> RelightError:
    """The exception a client raises for an error reply: the server's own class where it names one."""
    try:
        body = json.loads(content)
        name, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        name, detail = "", content.decode(errors="replace")[:500] or f"HTTP {status}"
    cls = _ERROR_CLASSES.get(name)
    if status in _UNAVAILABLE and (cls is None or cls is StoreError):
        return StoreUnavailableError(f"the store server at {url} answered {status}: {detail}")
    if cls is not None:
        return cls(detail)
    if status == 401:
        return StoreError(
            f"the store server at {url} refused the request ({detail}); pass token= or set RELIGHT_STORE_TOKEN"
        )
    if status == 404:
        return NotFoundError(detail)
    if status == 409:
        return InvalidStateError(detail)
    if status == 422:
        return ConfigError(detail)
    return StoreError(f"the store server at {url} answered {status}: {detail}")
