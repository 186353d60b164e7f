"""The event loop relight runs its own work on: uvloop where it is installed, asyncio's otherwise.

The gateway's CPU per LLM call is mostly event-loop work (socket reads and writes, callbacks,
timers), and uvloop does that work in C. It is optional: where it is not installed (Windows, PyPy) or
``RELIGHT_UVLOOP=0`` is set, asyncio's own loop runs everything exactly as before.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "new_event_loop", "run"]

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes relight's event loops: ``uvloop.new_event_loop`` if usable, else asyncio's."""
    if os.environ.get("RELIGHT_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """:func:`asyncio.run` on relight's event loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coroutine)
