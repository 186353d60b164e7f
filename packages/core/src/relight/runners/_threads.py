"""Sync agents on threads that can be abandoned: a hung agent costs its thread, never a runner's slot.

A thread cannot be killed. With a fixed pool (``ThreadPoolExecutor(concurrency)``) a timed-out agent
keeps its worker for good, and after ``concurrency`` hangs the runner claims rollouts it can never
run. Here every sync attempt gets a fresh daemon thread: the awaiting side can give up on it (time
out, cancel) and the slot is free at once, while the abandoned thread runs on by itself (counted,
so a runner can say how many it carries) and never keeps the process from exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["AgentThreads"]

T = TypeVar("T")


class AgentThreads:
    """Starts one daemon thread per call; :attr:`abandoned` counts those still running after their caller gave up."""

    def __init__(self, name: str = "relight-agent") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._abandoned = 0
        self._started = 0

    @property
    def abandoned(self) -> int:
        """Threads still running whose caller stopped waiting for them (timed out or cancelled)."""
        with self._lock:
            return self._abandoned

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``call()`` on a new thread; the future has its result. Cancelling the future abandons the thread."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        state = {"finished": False, "given_up": False}

        def settle(outcome: Callable[[], None]) -> None:
            if not future.done():
                outcome()

        def target() -> None:
            report: Callable[[], None]
            try:
                report = functools.partial(future.set_result, call())
            except BaseException as error:  # delivered to the awaiting side, like an executor would
                report = functools.partial(future.set_exception, error)
            with self._lock:
                state["finished"] = True
                if state["given_up"]:
                    self._abandoned -= 1
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
                loop.call_soon_threadsafe(settle, report)

        def on_done(done: asyncio.Future[T]) -> None:
            if done.cancelled():
                with self._lock:
                    if not state["finished"]:
                        state["given_up"] = True
                        self._abandoned += 1

        future.add_done_callback(on_done)
        with self._lock:
            self._started += 1
            number = self._started
        threading.Thread(target=target, name=f"{self.name}-{number}", daemon=True).start()
        return future
