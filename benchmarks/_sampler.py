"""Where a benchmark's CPU goes: py-spy samples this process's threads, and each sample is charged to a part of relight.

While the ``with`` block runs, py-spy (``requirements-dev.txt``) reads the Python stack of every thread of this
process (and, given ``children``, of the processes it starts, such as runner processes) from outside it, ``rate``
times a second, without the interpreter lock, and keeps a thread's sample only while the kernel has that thread
running or ready to run. A thread asleep in C (the event loop in epoll, the SQLite writer on its queue, any thread
waiting for the interpreter lock) costs nothing, so a part's share of the samples is its share of the CPU time. A
sample is charged to the part of its innermost frame that belongs to one (:data:`PARTS`): the agent and its
client, the gateway, the store, the runner, the trainer; a thread of the benchmark's fake model goes to it whatever
its stack; a stack whose innermost frame is the event loop's, or in no part, is the event loop's own work (its C
included: polling, socket reads, running the callbacks) where an event loop runs the thread, else other. A child
process's samples go to ``"<children>: <part>"``.

Why not a sampling thread inside the process, as this module was before: such a thread can read the others'
stacks only while it holds the interpreter lock, so it sees a thread only when that thread has just let go of
the lock. Under uvloop the loop thread lets go of it after each callback, inside uvloop's C, where its only
Python frame is the one that started the loop: every callback's CPU was charged to "event loop" (on the loop
benchmark 56% event loop, 0.2% gateway, against 26% and 6% under asyncio, whose loop lets go of the lock at its
socket calls: a milder bias of the same kind).

py-spy must be allowed to read this process's memory (ptrace rights: the same user, and where
``kernel.yama.ptrace_scope`` is 1 or more, root or ``CAP_SYS_PTRACE``). Without py-spy or those rights the
benchmark still runs: :meth:`Sampler.shares` is empty and :attr:`Sampler.error` says why.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import TracebackType
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
"""Parts in the order they are looked for, and the file paths that belong to each."""
_LOOP = ("/asyncio/", "/selectors.py", "uvloop")
_LOOP_ITSELF = ("/asyncio/runners.py", "/asyncio/base_events.py", "/asyncio/events.py", "/selectors.py", "uvloop")
"""Where the innermost frame is one of these, the loop itself runs (polls, reads sockets, dispatches), whatever
started it: a runner process's loop is started from relight/runner.py, which must not make its work the runner's."""
_PROCESSES = re.compile(r'(?:process \d+:"[^"]*";)*')
"""py-spy's ``process <pid>:"<command line>";`` items before a stack: the root process, then each child down to
the sampled one (a command line may hold ``;``, so the stack cannot simply be split)."""


class Sampler:
    """Samples the stacks of this process's threads with py-spy while the ``with`` block runs."""

    def __init__(self, rate: int = 100, *, fake_threads: str = "relight-server", children: str | None = None) -> None:
        self.rate = rate
        self.fake_threads = fake_threads
        """Threads whose name starts with this serve the benchmark's fake model: charged to it."""
        self.children = children
        """What this process's children are (``"runner processes"``): they are sampled too when given, else not."""
        self.samples: Counter[str] = Counter()
        """Samples of a running thread charged to each part."""
        self.error: str | None = None
        """Why there is no profile (py-spy missing, or not allowed to read this process); None if there is one."""
        self._output = Path(tempfile.mkdtemp(prefix="relight-profile-")) / "stacks.txt"
        self._spy: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        search = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)))
        executable = shutil.which("py-spy", path=search)  # the virtual environment's first
        if executable is None:
            self.error = "no profile: py-spy is not installed (pip install py-spy)"
            return self
        command = [executable, "record", "--pid", str(os.getpid()), "--rate", str(self.rate), "--nonblocking"]
        command += ["--threads", "--full-filenames", "--format", "raw", "--output", str(self._output)]
        if self.children is not None:
            command.append("--subprocesses")
        self._spy = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_BACKTRACE": "0"},
        )
        assert self._spy.stdout is not None
        if not self._spy.stdout.readline().startswith("py-spy> Sampling"):  # its first line once it samples
            self._stop()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._spy is not None:
            self._spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
            self._stop()
        if self._output.exists():
            for line in self._output.read_text(errors="replace").splitlines():
                stack, _, count = line.rpartition(" ")
                if count.isdigit():  # seen once: a line ending in "MainThread;" with no count, which failed the run
                    self.samples[self._charged(stack)] += int(count)
        shutil.rmtree(self._output.parent, ignore_errors=True)

    def _stop(self) -> None:
        assert self._spy is not None
        _, errors = self._spy.communicate()
        if self._spy.returncode != 0:
            why = " ".join(errors.split()) or f"exit status {self._spy.returncode}"
            self.error = (
                f"no profile: py-spy could not sample this process ({why}); it needs ptrace rights on it: "
                "the same user, and root where kernel.yama.ptrace_scope is 1 or more"
            )
        self._spy = None

    def shares(self) -> dict[str, float]:
        """Each part's share of the samples, largest first."""
        total = sum(self.samples.values()) or 1
        return {part: count / total for part, count in self.samples.most_common()}

    def _charged(self, stack: str) -> str:
        """What one line of py-spy's raw output goes to, given with ``--subprocesses`` or without."""
        processes = _PROCESSES.match(stack)
        assert processes is not None  # it matches the empty string
        part = self._part(stack[processes.end() :].split(";"))
        return f"{self.children}: {part}" if processes.group().count('";') > 1 else part

    def _part(self, stack: list[str]) -> str:
        """The part one sample goes to; ``stack`` is py-spy's: ``thread (tid): name`` then frames, outermost first."""
        thread, *frames = stack
        if thread.partition("): ")[2].startswith(self.fake_threads):
            return "fake model (benchmark)"
        if frames and any(marker in frames[-1] for marker in _LOOP_ITSELF):
            return "event loop"
        for frame in reversed(frames):
            for part, markers in PARTS:
                if any(marker in frame for marker in markers):
                    return part
        return "event loop" if any(marker in frame for frame in frames for marker in _LOOP) else "other"
