"""Spans made with OpenTelemetry inside a rollout attempt reach the store, tagged and batched."""

import asyncio
import contextvars
import json
import logging
import math
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relight import attempt_scope, emit_annotation, emit_reward, semconv
from relight.records import RolloutRequest, SpanKind
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight.tracing import otel as tracing
from relight.tracing.batcher import SpanBatcher

ROLLOUTS = ("r1", "r2", "r3", "r4")


@pytest.fixture
async def store() -> AsyncIterator[InMemoryStore]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input=rid, rollout_id=rid) for rid in ROLLOUTS])
    for _ in ROLLOUTS:  # attempts r1-a1 …: the store takes spans of attempts it started
        assert await store.claim("w") is not None
    yield store
    await store.close()


@pytest.fixture
async def batcher(store: InMemoryStore) -> AsyncIterator[SpanBatcher]:
    batcher = SpanBatcher(store)
    tracing.install(batcher)
    yield batcher
    tracing.uninstall()
    await batcher.aclose()


async def test_spans_in_an_attempt_reach_the_store_with_its_ids(store: InMemoryStore, batcher: SpanBatcher) -> None:
    with (
        attempt_scope("r1", "r1-a1"),
        tracing.tracer().start_as_current_span("agent", attributes={semconv.ROLE: "planner"}) as outer,
        tracing.tracer().start_as_current_span("tool call"),
    ):
        pass
    await batcher.flush()
    inner, agent = await store.query_spans("r1")
    assert (inner.name, agent.name) == ("tool call", "agent")
    assert {inner.attempt_id, agent.attempt_id} == {"r1-a1"}
    assert inner.parent_id == agent.span_id == format(outer.get_span_context().span_id, "016x")
    assert inner.trace_id == agent.trace_id
    assert agent.attributes[semconv.ROLE] == "planner"
    assert agent.attributes[semconv.ROLLOUT_ID] == "r1"
    assert agent.end_time >= agent.start_time > 0
    assert batcher.written == 2


async def test_rewards_and_annotations_become_spans(store: InMemoryStore, batcher: SpanBatcher) -> None:
    with attempt_scope("r1", "r1-a1"):
        emit_reward(0.5, name="format")
        emit_reward(1)
        emit_annotation({"answer": "42", "scores": [1, 2]}, name="final")
    await batcher.flush()
    format_reward, reward, annotation = await store.query_spans("r1", "r1-a1")
    assert (format_reward.kind, format_reward.attributes[semconv.REWARD]) == (SpanKind.REWARD, 0.5)
    assert format_reward.attributes[semconv.REWARD_NAME] == "format"
    assert (reward.attributes[semconv.REWARD], reward.attributes[semconv.REWARD_NAME]) == (1.0, "reward")
    assert annotation.kind is SpanKind.ANNOTATION
    payload = annotation.attributes[semconv.ANNOTATION]
    assert isinstance(payload, str)
    assert json.loads(payload) == {"answer": "42", "scores": [1, 2]}


@pytest.mark.parametrize("bad", [math.nan, math.inf, True])
def test_a_reward_must_be_a_finite_number(bad: float) -> None:
    with attempt_scope("r1", "r1-a1"), pytest.raises(ValueError, match="finite number"):
        emit_reward(bad)


async def test_spans_outside_an_attempt_are_ignored(
    store: InMemoryStore, batcher: SpanBatcher, caplog: pytest.LogCaptureFixture
) -> None:
    with tracing.tracer().start_as_current_span("unrelated"):
        emit_reward(1.0)
    with attempt_scope("r1", "r1-a1"), tracing.tracer().start_as_current_span("related"):
        pass
    await batcher.flush()
    assert [s.name for s in await store.query_spans("r1")] == ["related"]
    assert (await store.stats()).spans == 1
    assert "emitted outside a rollout attempt" in caplog.text


async def test_concurrent_attempts_do_not_mix(store: InMemoryStore, batcher: SpanBatcher) -> None:
    async def agent(rollout_id: str) -> None:
        with attempt_scope(rollout_id, f"{rollout_id}-a1"):
            for step in range(5):
                with tracing.tracer().start_as_current_span(f"{rollout_id} step {step}"):
                    await asyncio.sleep(0)  # let the other agents interleave
            emit_reward(float(ROLLOUTS.index(rollout_id)))

    def threaded_agent(rollout_id: str) -> None:
        with attempt_scope(rollout_id, f"{rollout_id}-a1"):
            for step in range(5):
                with tracing.tracer().start_as_current_span(f"{rollout_id} step {step}"):
                    pass
            emit_reward(float(ROLLOUTS.index(rollout_id)))

    threads = [threading.Thread(target=threaded_agent, args=(rid,)) for rid in ROLLOUTS[2:]]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(agent(rid) for rid in ROLLOUTS[:2]))
    await asyncio.to_thread(lambda: [thread.join() for thread in threads])
    await batcher.flush()
    for index, rollout_id in enumerate(ROLLOUTS):
        spans = await store.query_spans(rollout_id)
        assert [s.name for s in spans[:5]] == [f"{rollout_id} step {step}" for step in range(5)]
        assert {s.attempt_id for s in spans} == {f"{rollout_id}-a1"}
        assert spans[5].attributes[semconv.REWARD] == float(index)


async def test_a_thread_started_inside_an_attempt_keeps_it(store: InMemoryStore, batcher: SpanBatcher) -> None:
    def work() -> None:
        with tracing.tracer().start_as_current_span("in a worker thread"):
            pass

    with attempt_scope("r2", "r2-a1"):
        context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(work,))
    thread.start()
    await asyncio.to_thread(thread.join)
    await batcher.flush()
    (span,) = await store.query_spans("r2")
    assert span.attempt_id == "r2-a1"


async def test_a_failing_store_is_logged_and_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    broken = InMemoryStore()
    await broken.enqueue([RolloutRequest(input=None, rollout_id="r1")])
    await broken.close()
    batcher = SpanBatcher(broken)
    processor = tracing.install(batcher)
    dropped_before = processor.dropped  # the process's one processor counts earlier tests' drops too
    try:
        with caplog.at_level(logging.ERROR), attempt_scope("r1", "r1-a1"):
            with tracing.tracer().start_as_current_span("step"):
                pass
            emit_reward(1.0)
        await batcher.flush()
    finally:
        tracing.uninstall()
        await batcher.aclose()
    assert (batcher.written, batcher.failed, processor.dropped - dropped_before) == (0, 2, 0)
    assert "could not write 2 span(s)" in caplog.text
    assert "store is closed" in caplog.text


async def test_spans_of_an_unknown_rollout_cost_no_one_else_theirs(
    store: InMemoryStore, batcher: SpanBatcher, caplog: pytest.LogCaptureFixture
) -> None:
    for rollout_id in ("r1", "not-enqueued", "r2"):
        with attempt_scope(rollout_id, f"{rollout_id}-a1"), tracing.tracer().start_as_current_span("step"):
            pass
    await batcher.flush()
    assert (batcher.written, batcher.failed) == (2, 1)
    assert [len(await store.query_spans(rid)) for rid in ("r1", "r2")] == [1, 1]
    assert "refused 1 span(s)" in caplog.text


async def test_uninstall_stops_recording_and_install_replaces_the_batcher(
    store: InMemoryStore, batcher: SpanBatcher
) -> None:
    tracing.uninstall()
    with attempt_scope("r1", "r1-a1"), tracing.tracer().start_as_current_span("after uninstall"):
        pass
    other = SpanBatcher(store)
    tracing.install(other)
    try:
        with attempt_scope("r1", "r1-a1"), tracing.tracer().start_as_current_span("to the new batcher"):
            pass
        await other.flush()
    finally:
        tracing.uninstall()
        await other.aclose()
    assert [s.name for s in await store.query_spans("r1")] == ["to the new batcher"]
    assert (batcher.written, other.written) == (0, 1)


async def test_spans_reach_a_sqlite_file(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "traced.db")
    await store.enqueue([RolloutRequest(input=None, rollout_id="r1")])
    assert await store.claim("w") is not None
    batcher = SpanBatcher(store)
    tracing.install(batcher)
    try:
        with attempt_scope("r1", "r1-a1"):
            for step in range(50):
                with tracing.tracer().start_as_current_span(f"step {step}"):
                    pass
            emit_reward(2.0)
        await batcher.flush()
    finally:
        tracing.uninstall()
        await batcher.aclose()
    await store.close()
    reopened = SqliteStore(tmp_path / "traced.db")
    spans = await reopened.query_spans("r1")
    await reopened.close()
    assert [s.name for s in spans] == [f"step {step}" for step in range(50)] + ["reward reward"]
