"""Batched, non-blocking span delivery to a store.

Any thread may :meth:`SpanBatcher.submit` a span; it only appends to a buffer. One task on the
store's event loop writes whatever has gathered in a single ``add_spans`` call, so while a write is
in flight the next batch builds up by itself: no timers, no per-span round trip, and the agent's
thread never waits on the store. Failures are logged and counted, never raised into the caller
that submitted; they are remembered per attempt, so that whoever finishes an attempt can ask
(:meth:`SpanBatcher.flush_attempt`) whether all of its spans are in the store, and fail it if not
instead of recording a success with a hole in it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence

from relight.errors import ConfigError, InvalidStateError, NotFoundError, StoreError
from relight.records import Span
from relight.store import Store
from relight.tracing.hook_failures import hook_failed

__all__ = ["SpanBatcher", "SpansLostError"]

logger = logging.getLogger(__name__)


class SpansLostError(StoreError):
    """Spans of an attempt could not be written to the store; the attempt's record would have a hole."""


class SpanBatcher:
    """Gathers spans from any thread and writes them to ``store`` from ``loop`` in batches.

    Create it on the thread that runs ``loop`` (by default the running loop); submit from anywhere.
    ``written`` and ``failed`` count the spans that reached the store and those that never will.
    """

    def __init__(self, store: Store, *, max_batch: int = 1024, loop: asyncio.AbstractEventLoop | None = None):
        self.store = store
        self.max_batch = max_batch
        self._loop = loop or asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._buffer: list[Span] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._lost: dict[tuple[str, str], int] = {}
        self.written = 0
        self.failed = 0
        self._task = self._loop.create_task(self._run(), name="relight-span-batcher")

    def submit(self, span: Span) -> None:
        """Queue a span for writing; returns at once, from any thread."""
        self.submit_many((span,))

    def submit_many(self, spans: Sequence[Span]) -> None:
        with self._lock:
            closed = self._closed
            first = not closed and not self._buffer
            if closed:
                self.failed += len(spans)
            else:
                self._buffer.extend(spans)
        if closed:
            self._note_lost(spans)
            logger.warning("relight: %d span(s) submitted after the batcher closed were dropped", len(spans))
        elif first and _on_loop(self._loop):
            self._mark_pending()
        elif first:
            try:
                self._loop.call_soon_threadsafe(self._mark_pending)
            except RuntimeError:  # the store's loop has closed: nothing will ever write these
                with self._lock:
                    dropped, self._buffer = self._buffer, []
                    self.failed += len(dropped)
                self._note_lost(dropped)
                logger.warning("relight: span(s) dropped: the event loop of the span batcher has closed")

    async def flush(self) -> None:
        """Return once every span submitted before the call has been written (or failed).

        Raises:
            SpansLostError: the task that writes spans has stopped (a bug in it): what it held never will be.
        """
        with self._lock:
            pending = bool(self._buffer)
        if pending:
            self._mark_pending()
        idle = asyncio.ensure_future(self._idle.wait())
        await asyncio.wait((idle, self._task), return_when=asyncio.FIRST_COMPLETED)
        if not idle.done():
            idle.cancel()
            raise SpansLostError(f"the span batcher stopped writing: {self._stopped_by()}")

    async def flush_attempt(self, rollout_id: str, attempt_id: str) -> None:
        """:meth:`flush`, then raise SpansLostError if any span of this attempt failed to be written (once)."""
        await self.flush()
        with self._lock:
            lost = self._lost.pop((rollout_id, attempt_id), 0)
        if lost:
            raise SpansLostError(
                f"{lost} span(s) of attempt {attempt_id!r} of rollout {rollout_id!r} could not be written to the store"
            )

    async def aclose(self) -> None:
        """Write what is buffered, then stop; spans submitted from now on are dropped and counted."""
        with self._lock:
            self._closed = True
        try:
            await self.flush()
        except SpansLostError as error:
            logger.error("relight: %s; %d span(s) were never written", error, len(self._buffer))
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)  # a task that had stopped was reported by flush

    def _stopped_by(self) -> str:
        if self._task.cancelled():
            return "its task was cancelled"
        error = self._task.exception()
        return f"{type(error).__name__}: {error}" if error is not None else "its task ended"

    def _mark_pending(self) -> None:
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    batch, self._buffer = self._buffer[: self.max_batch], self._buffer[self.max_batch :]
                if not batch:
                    break
                try:
                    await self._write(batch)
                except Exception:  # a bug in writing: this batch is lost (its attempts are told), the next goes on
                    hook_failed("SpanBatcher: writing spans")
                    with self._lock:
                        self.failed += len(batch)
                    self._note_lost(batch)
            if not self._wake.is_set():
                self._idle.set()

    async def _write(self, batch: list[Span]) -> None:
        try:
            await self.store.add_spans(batch)
            self.written += len(batch)
        except (NotFoundError, InvalidStateError, ConfigError):  # the store refused part of the batch
            by_attempt: dict[tuple[str, str], list[Span]] = {}
            for span in batch:
                by_attempt.setdefault((span.rollout_id, span.attempt_id), []).append(span)
            if len(by_attempt) == 1:
                self.failed += len(batch)
                self._note_lost(batch)
                logger.exception("relight: the store refused %d span(s) of one attempt", len(batch))
            else:  # one attempt's bad span must not cost the others theirs
                for spans in by_attempt.values():
                    await self._write(spans)
        except Exception:
            self.failed += len(batch)
            self._note_lost(batch)
            logger.exception("relight: could not write %d span(s) to the store", len(batch))

    def _note_lost(self, spans: Sequence[Span]) -> None:
        with self._lock:
            for span in spans:
                key = (span.rollout_id, span.attempt_id)
                self._lost[key] = self._lost.get(key, 0) + 1


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
