"""State-machine rules every store backend applies, kept apart from storage so each backend is just I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence

from relight.errors import ConfigError, LeaseLostError, NotFoundError, StoreError
from relight.models import Attempt, AttemptStatus, Rollout, RolloutRequest, RolloutStatus, new_id


def check_lease_seconds(lease_seconds: float) -> float:
    if not math.isfinite(lease_seconds) or lease_seconds <= 0:
        raise ConfigError(f"lease_seconds must be a positive number, got {lease_seconds!r}")
    return lease_seconds


def check_page(limit: int | None, offset: int) -> None:
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be None or >= 0, got {limit!r}")
    if offset < 0:
        raise ConfigError(f"offset must be >= 0, got {offset!r}")


def rollout_not_found(rollout_id: str) -> NotFoundError:
    return NotFoundError(f"rollout {rollout_id!r} does not exist")


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
