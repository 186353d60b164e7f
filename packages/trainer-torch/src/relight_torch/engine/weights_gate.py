"""The engine's weights lock: generation steps and weight updates take turns, and an update never starves."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["WeightsGate"]


class WeightsGate:
    """The weights lock. Generation steps take it one at a time; an update waiting for it goes before the next
    step, so a long generation cannot hold an update back by re-taking the lock first."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.updates_waiting = 0
        self._held = False

    @contextmanager
    def step(self) -> Iterator[None]:
        with self.condition:
            self.condition.wait_for(lambda: not self._held and self.updates_waiting == 0)
            self._held = True
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def update(self) -> Iterator[None]:
        with self.condition:
            self.updates_waiting += 1
            self.condition.notify_all()
            self.condition.wait_for(lambda: not self._held)
            self._held = True
            self.updates_waiting -= 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self.condition:
            self._held = False
            self.condition.notify_all()
