"""Event-driven waiting shared by the store backends: no fixed-interval polling.

A waiter notes :attr:`Changes.version`, looks at the state, and if it is not what it wants sleeps
in :meth:`Changes.wait` until the state changes, the next lease expires or its deadline passes.
Because :meth:`Changes.wait` returns at once when the version moved since it was noted, a change
that lands between looking and sleeping is never missed, even when looking means awaiting a read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["Changes", "deadline_after"]


def deadline_after(timeout: float | None) -> float | None:
    """The event loop's time at which ``timeout`` runs out (None: never).

    Deadlines run on the loop's monotonic clock, not the store's clock, so a test's frozen
    store clock cannot make a timeout last forever.
    """
    return None if timeout is None else asyncio.get_running_loop().time() + max(0.0, timeout)


class Changes:
    """A version counter bumped after every change a waiter may be waiting for.

    Belongs to one event loop: call :meth:`notify` and :meth:`wait` from that loop only.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.version = 0
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter: the state they looked at may have changed."""
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, *, deadline: float | None, next_expiry: float | None) -> bool:
        """Sleep until a change after version ``seen``, the lease expiry ``next_expiry`` or ``deadline``.

        Args:
            seen: :attr:`version` as it was before the caller looked at the state.
            deadline: from :func:`deadline_after`; None waits without limit.
            next_expiry: the earliest running lease's expiry on the store's clock, if any.

        Returns:
            False once the deadline has passed (the caller should stop), else True.
        """
        timeouts: list[float] = []
        if deadline is not None:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            timeouts.append(remaining)
        if next_expiry is not None:
            timeouts.append(max(0.0, next_expiry - self._clock()))
        if self.version != seen:
            return True
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that lands
        # as the event is set, which left a cancelled claim waiting out its whole timeout.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(timeouts, default=None)):
                await self._event.wait()
        return True
