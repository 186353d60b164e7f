"""Which rollout attempt the running code belongs to, carried in a context variable.

Runners enter :func:`attempt_scope` around the agent; everything the agent does underneath (spans,
emitted rewards, adapter callbacks, threads started with ``contextvars.copy_context``) is tagged
with that attempt, so many rollouts run in one process without their records mixing.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["AttemptRef", "attempt_scope", "current_attempt"]


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """The ids that tie a record to one attempt of one rollout."""

    rollout_id: str
    attempt_id: str


_current: ContextVar[AttemptRef | None] = ContextVar("relight_current_attempt", default=None)


def current_attempt() -> AttemptRef | None:
    """The attempt the calling code runs under, or None outside any rollout."""
    return _current.get()


@contextmanager
def attempt_scope(rollout_id: str, attempt_id: str) -> Generator[AttemptRef]:
    """Tag everything recorded inside the block with this rollout attempt."""
    ref = AttemptRef(rollout_id, attempt_id)
    token = _current.set(ref)
    try:
        yield ref
    finally:
        _current.reset(token)
