"""Where a benchmark's CPU goes: a sampling profiler that charges each sample to a part of relight.

Every ``interval`` seconds a thread of its own reads every other thread's Python stack
(``sys._current_frames``) and charges the sample to the part of the system that is running, by
the file of the innermost frame that belongs to a known part: the agent and its client (``openai``,
``httpx``), the gateway (``relight.gateway``, uvicorn, Starlette, aiohttp), the store (stores, span
batcher), the runner, the trainer (transitions, credit, the algorithm), the benchmark's fake model
(which runs on threads of the same process), or the event loop's own work. A thread that waits
(in ``select``, on a lock or a queue, in a socket read) is idle, not charged. A sample every few
milliseconds costs little and needs no tool outside Python, so it runs with every loop benchmark.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from types import FrameType, TracebackType
from typing import Self

__all__ = ["PARTS", "Sampler"]

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("agent/client", ("/openai/", "/httpx/", "/httpcore/", "/anyio/", "/h11/", "/relight/testing/agents.py")),
    ("gateway", ("/relight/gateway/", "/uvicorn/", "/starlette/", "/aiohttp/", "/relight/_server.py")),
    ("store", ("/relight/stores/", "/relight/batcher.py", "/sqlite3/")),
    ("runner", ("/relight/runner", "/relight/agent.py", "/relight/_threads.py", "/relight/tracing.py")),
    (
        "trainer",
        (
            "/relight/trainer.py",
            "/relight/synchronous.py",
            "/relight/asynchronous.py",
            "/relight/steps.py",
            "/relight/transitions.py",
            "/relight/credit.py",
            "/relight/testing/algo",
        ),
    ),
)
"""Parts in the order they are looked for, and the file paths that belong to each. A sample in none of
them is the event loop's own work where an event loop runs the thread (its frames are outermost), else other."""
_LOOP = ("/asyncio/", "/selectors.py")

_WAITS = frozenset(
    {
        ("selectors.py", "select"),
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("queue.py", "get"),
        ("thread.py", "_worker"),
        ("socket.py", "readinto"),
        ("ssl.py", "read"),
        ("sync.py", "read"),
    }
)
"""(file name, function) of the innermost frame of a thread that is waiting, not working."""


class Sampler:
    """Samples the stacks of this process's threads while the ``with`` block runs."""

    def __init__(self, interval: float = 0.005, *, fake_threads: str = "relight-server") -> None:
        self.interval = interval
        self.fake_threads = fake_threads
        """Threads whose name starts with this serve the benchmark's fake model: charged to it."""
        self.samples: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relight-sampler", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self) -> dict[str, float]:
        """Each part's share of the busy samples, largest first (idle samples left out)."""
        busy = sum(self.samples.values()) or 1
        return {part: count / busy for part, count in self.samples.most_common()}

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():  # pyright: ignore[reportPrivateUsage]
                if ident == me:
                    continue
                part = self._part(frame, names.get(ident, ""))
                if part is not None:
                    self.samples[part] += 1
            del frame

    def _part(self, frame: FrameType, thread_name: str) -> str | None:
        code = frame.f_code
        if (code.co_filename.rsplit("/", 1)[-1], code.co_name) in _WAITS:
            return None
        if thread_name.startswith(self.fake_threads):
            return "fake model (benchmark)"
        in_loop = False
        current: FrameType | None = frame
        while current is not None:
            path = current.f_code.co_filename
            for part, markers in PARTS:
                if any(marker in path for marker in markers):
                    return part
            in_loop = in_loop or any(marker in path for marker in _LOOP)
            current = current.f_back
        return "event loop" if in_loop else "other"
