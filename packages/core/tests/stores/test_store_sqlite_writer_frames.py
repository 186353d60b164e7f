"""The SQLite writer's statements stay sound when a frame of the writer thread is freed on another thread.

A sampling profiler (the loop benchmark's, or any other that reads ``sys._current_frames``) holds
frames of the writer thread for a moment, and a traceback handed to the caller's event loop holds a
failing job's frames; a frame that outlives its job is then freed on that other thread, and its
locals with it. A cursor among them that still held one of the connection's cached statements
(``executemany`` leaves its statement on the cursor) resets that statement from there, which can
land while the writer is running the same statement again: the writer's next use of it then failed
with "bad parameter or other API misuse" (SQLITE_MISUSE), about once per loop benchmark run. The
test forces that interleaving instead of waiting for it.
"""

import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from relight.records import RolloutRequest, Span
from relight.stores.sqlite import SqliteStore
from relight_testing.store import make_span


class _Hooked(str):
    """A span id whose binding runs ``hook`` on the writer thread, in the middle of the spans' INSERT.

    sqlite3 asks any parameter that is not exactly a str, int, float or bytes to adapt itself
    (``__conform__``) just before it binds it: after the statement was taken for this cursor, before it runs.
    """

    hook: Callable[[], None]

    def __conform__(self, protocol: object) -> str:
        self.hook()
        return str(self)


async def test_a_writer_frame_freed_on_another_thread_leaves_the_spans_insert_sound(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        (rollout,) = await store.enqueue([RolloutRequest(input=0)])
        claimed = await store.claim("w")
        assert claimed is not None
        attempt_id = claimed[1].attempt_id
        held: list[FrameType | None] = []

        def sample() -> None:
            """What a sampling profiler does: keep the writer's stack (this frame and those it came from)."""
            held.append(inspect.currentframe())

        def free_elsewhere() -> None:
            """Let go of the sampled stack on a thread of its own while the writer is inside the same INSERT."""
            other = threading.Thread(target=held.clear)
            other.start()
            other.join()

        def span(span_id: str, hook: Callable[[], None] | None = None) -> Span:
            made = make_span(rollout.rollout_id, attempt_id, span_id)
            if hook is None:
                return made
            hooked = _Hooked(span_id)
            hooked.hook = hook
            return made.model_copy(update={"span_id": hooked})

        await store.add_spans([span("a", sample)])  # its job's frame outlives the job, held by the "profiler"
        await store.add_spans([span("b", free_elsewhere)])  # which frees it on another thread mid-INSERT
        await store.add_spans([span("c")])  # the INSERT's statement must still be sound
        assert [s.span_id for s in await store.query_spans(rollout.rollout_id)] == ["a", "b", "c"]
        assert not held
    finally:
        await store.close()
