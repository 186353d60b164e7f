"""State-machine rules every store backend applies, kept apart from storage so each backend is just I/O."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast

from pydantic import JsonValue

from relight.errors import ConfigError, InvalidStateError, LeaseLostError, NotFoundError, StoreError
from relight.records import Attempt, AttemptStatus, Rollout, RolloutRequest, RolloutStatus, Span, new_id
from relight.store import MAX_LEASE_SECONDS
from relight.summaries import SummaryFilter

MAX_INTEGER = 2**63 - 1
"""The largest count, offset or version the store takes (what SQLite and PostgreSQL can hold)."""
CLIENT_STATUSES = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.TIMED_OUT, AttemptStatus.CANCELLED}
)
"""The ends a worker may give an attempt; ``expired`` is the store's to give, when a lease runs out."""


def check_lease_seconds(lease_seconds: float) -> float:
    if not (math.isfinite(lease_seconds) and 0 < lease_seconds <= MAX_LEASE_SECONDS):
        raise ConfigError(
            f"lease_seconds must be a positive number of seconds up to {MAX_LEASE_SECONDS:.0f}, got {lease_seconds!r}"
        )
    return lease_seconds


def with_metadata(rollout: Rollout, metadata: Mapping[str, JsonValue]) -> Rollout:
    """``rollout`` with ``metadata`` merged into its own (see :meth:`relight.store.Store.update_metadata`)."""
    check_finite(dict(metadata), "metadata")
    return rollout.model_copy(update={"metadata": {**rollout.metadata, **metadata}})


def check_page(limit: int | None, offset: int) -> None:
    if limit is not None and not 0 <= limit <= MAX_INTEGER:
        raise ConfigError(f"limit must be None or between 0 and {MAX_INTEGER}, got {limit!r}")
    if not 0 <= offset <= MAX_INTEGER:
        raise ConfigError(f"offset must be between 0 and {MAX_INTEGER}, got {offset!r}")


def check_version(version: int | None) -> None:
    if version is not None and not 0 <= version <= MAX_INTEGER:
        raise ConfigError(f"version must be None or between 0 and {MAX_INTEGER}, got {version!r}")


def check_client_status(status: AttemptStatus) -> None:
    if status not in CLIENT_STATUSES:
        allowed = ", ".join(sorted(s.value for s in CLIENT_STATUSES))
        raise ConfigError(f"status must be one of {allowed} when a worker finishes an attempt, got {status.value!r}")


_NEED_NO_LOOK = frozenset({int, str, bool, type(None)})


def check_finite(value: JsonValue, field: str) -> None:
    """Raise ConfigError naming the place of the first NaN or infinity in ``value``: JSON has none, and a
    store would keep it as null (a reward that silently vanishes)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{field} must be a finite number, got {value!r}")
    elif isinstance(value, list):
        kinds = set(map(type, value))  # token ids, text and logprobs: the whole list at C speed
        if kinds <= _NEED_NO_LOOK or (kinds == {float} and all(map(math.isfinite, cast(list[float], value)))):
            return
        for index, item in enumerate(value):
            if type(item) not in _NEED_NO_LOOK:
                check_finite(item, f"{field}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if type(item) not in _NEED_NO_LOOK:
                check_finite(item, f"{field}.{key}")


def check_requests(requests: Iterable[RolloutRequest]) -> None:
    for request in requests:
        check_finite(request.input, "input")
        check_finite(request.metadata, "metadata")


def check_resources(items: Mapping[str, JsonValue]) -> None:
    check_finite(dict(items), "items")


def check_spans(spans: Iterable[Span]) -> None:
    for span in spans:
        check_finite(span.attributes, f"span {span.span_id!r} attributes")


def same_span(stored: Span, sent: Span) -> bool:
    """Whether ``sent`` repeats the span already stored (a retried write), apart from the id the store gave."""
    return stored.model_copy(update={"sequence_id": None}) == sent.model_copy(update={"sequence_id": None})


def conflicting_span(span: Span) -> InvalidStateError:
    return InvalidStateError(
        f"span {span.span_id!r} of attempt {span.attempt_id!r} of rollout {span.rollout_id!r} is already stored "
        "with different content; span ids must be unique within an attempt"
    )


def rollout_not_found(rollout_id: str) -> NotFoundError:
    return NotFoundError(f"rollout {rollout_id!r} does not exist")


def cursor_place(place: Mapping[str, int], where: SummaryFilter, field: Literal["before", "after"]) -> int | None:
    """Where the rollout a cursor of ``where`` names sits in ``place`` (rollout id → place); None without it."""
    rollout_id: str | None = getattr(where, field)
    if rollout_id is None:
        return None
    if rollout_id not in place:
        raise cursor_not_found(field, rollout_id)
    return place[rollout_id]


def cursor_not_found(field: str, rollout_id: str) -> NotFoundError:
    return NotFoundError(f"{field}={rollout_id!r}: there is no such rollout to page from")


def attempt_not_found(rollout_id: str, attempt_id: str) -> NotFoundError:
    return NotFoundError(f"attempt {attempt_id!r} of rollout {rollout_id!r} does not exist")


def resources_not_found(version: int | None, count: int) -> NotFoundError:
    if count == 0:
        return NotFoundError("no resources have been published yet")
    return NotFoundError(f"resources version {version} does not exist; versions 0..{count - 1} do")


def closed() -> StoreError:
    return StoreError("the store is closed")


def new_rollout(request: RolloutRequest, now: float) -> Rollout:
    rollout_id = request.rollout_id or new_id("ro")
    return Rollout(
        rollout_id=rollout_id,
        input=request.input,
        mode=request.mode,
        group_id=request.group_id or rollout_id,
        max_attempts=request.max_attempts,
        resources_version=request.resources_version,
        metadata=request.metadata,
        created_at=now,
    )


def recorded(
    requests: Sequence[RolloutRequest], worker_id: str, lease_seconds: float, now: float
) -> list[tuple[Rollout, Attempt]]:
    """The rollouts (and their one running attempt each) that ``record_rollouts`` stores for ``requests``.

    A recorded rollout ran elsewhere, so there is nothing here to run again: its ``max_attempts`` is 1,
    and an attempt whose lease runs out fails it instead of queueing it for a runner.
    """
    check_worker_id(worker_id)
    check_lease_seconds(lease_seconds)
    check_requests(requests)
    made: list[tuple[Rollout, Attempt]] = []
    seen: set[str] = set()
    for request in requests:
        rollout = new_rollout(request.model_copy(update={"max_attempts": 1}), now)
        if rollout.rollout_id in seen:
            raise rollout_exists(rollout.rollout_id)
        seen.add(rollout.rollout_id)
        made.append(start_attempt(rollout, worker_id, lease_seconds, now))
    return made


def same_record(stored: Rollout, sent: Rollout) -> bool:
    """Whether ``stored`` is the rollout ``sent`` recorded (a retried write), whatever happened to it since."""
    moving = {"status", "finished_at", "error"}
    return stored.model_dump(exclude=moving) == sent.model_dump(exclude=moving)


def check_worker_id(worker_id: str) -> None:
    if not worker_id:
        raise ConfigError("worker_id must be a non-empty string naming who ran the rollouts")


def rollout_exists(rollout_id: str) -> InvalidStateError:
    return InvalidStateError(f"rollout {rollout_id!r} already exists; a recorded rollout needs a rollout_id of its own")


def start_attempt(rollout: Rollout, worker_id: str, lease_seconds: float, now: float) -> tuple[Rollout, Attempt]:
    number = rollout.attempt_count + 1
    attempt = Attempt(
        rollout_id=rollout.rollout_id,
        attempt_id=f"{rollout.rollout_id}-a{number}",
        number=number,
        worker_id=worker_id,
        started_at=now,
        lease_expires_at=now + lease_seconds,
    )
    return rollout.model_copy(update={"status": RolloutStatus.RUNNING, "attempt_count": number}), attempt


def require_running(attempt: Attempt) -> None:
    if attempt.is_finished:
        raise LeaseLostError(
            f"attempt {attempt.attempt_id!r} of rollout {attempt.rollout_id!r} is {attempt.status.value}, "
            "not running: its lease expired or it already finished"
        )


def end_attempt(
    rollout: Rollout, attempt: Attempt, status: AttemptStatus, error: str | None, now: float
) -> tuple[Rollout, Attempt]:
    """The rollout and attempt after ``attempt`` ends with ``status``.

    Success ends the rollout. Any other end requeues it while attempts remain, else fails it.
    A rollout that was cancelled meanwhile stays cancelled.
    """
    if status is AttemptStatus.RUNNING:
        raise ConfigError("status must be a final attempt status, got 'running'")
    require_running(attempt)
    ended = attempt.model_copy(update={"status": status, "finished_at": now, "error": error})
    if rollout.is_finished:
        return rollout, ended
    if status is AttemptStatus.SUCCEEDED:
        update: dict[str, object] = {"status": RolloutStatus.SUCCEEDED, "finished_at": now, "error": None}
    elif status is AttemptStatus.CANCELLED:
        update = {"status": RolloutStatus.CANCELLED, "finished_at": now, "error": error}
    elif rollout.attempt_count < rollout.max_attempts:
        update = {"status": RolloutStatus.QUEUED, "error": error}
    else:
        update = {"status": RolloutStatus.FAILED, "finished_at": now, "error": error}
    return rollout.model_copy(update=update), ended


def expiry_error(attempt: Attempt) -> str:
    return f"lease expired at {attempt.lease_expires_at:.3f} without a heartbeat from worker {attempt.worker_id!r}"


def cancel_rollout(rollout: Rollout, attempts: Sequence[Attempt], now: float) -> tuple[Rollout, list[Attempt]]:
    """The rollout after cancelling it, and those of its attempts that were running, now cancelled.

    A rollout that has already finished is returned unchanged.
    """
    if rollout.is_finished:
        return rollout, []
    cancelled = [
        attempt.model_copy(update={"status": AttemptStatus.CANCELLED, "finished_at": now})
        for attempt in attempts
        if not attempt.is_finished
    ]
    return rollout.model_copy(update={"status": RolloutStatus.CANCELLED, "finished_at": now}), cancelled
