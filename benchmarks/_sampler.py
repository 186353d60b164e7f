"""Where a benchmark's CPU goes: a sampling profiler that charges CPU time to the parts of relight.

Every ``interval`` seconds a thread of its own reads every other thread's Python stack
(``sys._current_frames``) and the CPU time each thread has used since the last look (from the
kernel's per-thread counter, ``/proc/self/task/<tid>/schedstat``), and charges that time to the part
of the system that is running, by the file of the innermost frame that belongs to a known part:
the agent and its client (``openai``, ``httpx``), the gateway (``relight.gateway``, uvicorn,
Starlette), the store (stores, span batcher), the runner, the trainer (transitions, credit, the
algorithm), the benchmark's fake model (which runs on threads of the same process), or the event
loop's own work. Charging CPU time rather than counting samples matters: a thread that waits in C
(the SQLite writer on its queue, a reader in a socket) shows a Python frame of its part but uses
no CPU, and so costs nothing here. A look every few milliseconds costs little and needs no tool
outside Python, so it runs with every loop benchmark.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict
from types import FrameType, TracebackType
from typing import Self

__all__ = ["PARTS", "Sampler"]

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("agent/client", ("/openai/", "/httpx/", "/httpcore/", "/anyio/", "/h11/", "/relight/testing/agents.py")),
    ("gateway", ("/relight/gateway/", "/uvicorn/", "/starlette/", "/httptools/", "/relight/_server.py")),
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
_LOOP = ("/asyncio/", "/selectors.py", "uvloop")


class Sampler:
    """Samples the stacks of this process's threads while the ``with`` block runs."""

    def __init__(self, interval: float = 0.005, *, fake_threads: str = "relight-server") -> None:
        self.interval = interval
        self.fake_threads = fake_threads
        """Threads whose name starts with this serve the benchmark's fake model: charged to it."""
        self.seconds: defaultdict[str, float] = defaultdict(float)
        """CPU seconds charged to each part."""
        self._files: dict[int, int] = {}
        self._used: dict[int, float] = {}
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
        for descriptor in self._files.values():
            os.close(descriptor)

    def shares(self) -> dict[str, float]:
        """Each part's share of the CPU time charged, largest first."""
        busy = sum(self.seconds.values()) or 1.0
        ranked = sorted(self.seconds.items(), key=lambda item: -item[1])
        return {part: seconds / busy for part, seconds in ranked}

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            self._look(me)

    def _look(self, me: int) -> None:
        """One look at every other thread. Its own method so that no frame outlives it: a frame held
        here keeps its locals alive, and they would be freed on this thread (once, a SQLite cursor
        freed so broke the store's writer: see ``relight.stores._sqlite_writer.Tx``)."""
        threads = {thread.ident: thread for thread in threading.enumerate()}
        for ident, frame in sys._current_frames().items():  # pyright: ignore[reportPrivateUsage]
            thread = threads.get(ident)
            if ident == me or thread is None or thread.native_id is None:
                continue
            spent = self._spent(thread.native_id)
            if spent > 0:
                self.seconds[self._part(frame, thread.name)] += spent

    def _spent(self, tid: int) -> float:
        """CPU seconds thread ``tid`` has used since the last call (0 on the first)."""
        descriptor = self._files.get(tid)
        try:
            if descriptor is None:
                descriptor = self._files[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            used = int(os.pread(descriptor, 64, 0).split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread has just ended
            return 0.0
        before = self._used.get(tid, used)
        self._used[tid] = used
        return used - before

    def _part(self, frame: FrameType, thread_name: str) -> str:
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
