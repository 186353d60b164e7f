"""A clock for store tests: leases expire when a test moves it, never by waiting.

Every store backend takes a ``clock`` (a function returning the wall time); the conformance kit
(:mod:`relight_testing.store`) injects a :class:`ManualClock`, and so can a backend's own tests.
"""

from __future__ import annotations

import threading

__all__ = ["ManualClock"]


class ManualClock:
    """A wall clock that moves only when told to, so lease expiry is tested without waiting."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward (from any thread) and return the new time."""
        with self._lock:
            self._now += seconds
            return self._now
