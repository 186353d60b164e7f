"""Instrumentor, relight.instrument/uninstrument through the plugin registry, and role/tool spans."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

import relight
from relight import semconv
from relight.plugins import plugin_manager, reset_plugins
from relight.records import RolloutRequest, SpanKind
from relight.stores.memory import InMemoryStore
from relight.tracing import otel as tracing
from relight.tracing.agent_spans import end_role_span, end_tool_span, start_role_span, start_tool_span
from relight.tracing.batcher import SpanBatcher
from relight.tracing.instrumentation import Instrumentor, guarded


class Recording(Instrumentor):
    framework = "recording"
    calls: ClassVar[list[str]] = []

    def _instrument(self) -> None:
        self.calls.append("instrument")

    def _uninstrument(self) -> None:
        self.calls.append("uninstrument")


class Missing(Instrumentor):
    framework = "missing"

    def _instrument(self) -> None:
        raise ImportError("relight-missing needs missingframework: pip install missingframework")

    def _uninstrument(self) -> None:
        pass


class Plugin:
    @relight.hookimpl
    def relight_register_adapters(self, register: Callable[[str, Callable[[], Any]], None]) -> None:
        register("recording", Recording)
        register("missing", Missing)


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recording]:
    monkeypatch.setenv("RELIGHT_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    plugin_manager().register(Plugin())
    recording = Recording()
    recording.uninstrument()
    recording.calls.clear()
    yield recording
    recording.uninstrument()
    reset_plugins()


def test_one_instance_per_adapter_class(adapters: Recording) -> None:
    assert Recording() is adapters
    assert Missing() is not adapters


def test_instrument_and_uninstrument_are_idempotent(adapters: Recording) -> None:
    adapters.uninstrument()
    adapters.instrument()
    Recording().instrument()
    assert adapters.is_instrumented
    adapters.uninstrument()
    adapters.uninstrument()
    assert adapters.calls == ["instrument", "uninstrument"]
    assert not adapters.is_instrumented


def test_instrument_by_name_goes_through_the_registry(adapters: Recording) -> None:
    assert relight.instrument("recording") == ["recording"]
    assert adapters.is_instrumented
    relight.uninstrument("recording")
    assert not adapters.is_instrumented


def test_instrument_all_skips_adapters_whose_framework_is_missing(
    adapters: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="relight.tracing.instrumentation"):
        assert relight.instrument() == ["recording"]
    assert "pip install missingframework" in caplog.text
    relight.uninstrument()
    assert not adapters.is_instrumented


def test_a_named_adapter_whose_framework_is_missing_raises(adapters: Recording) -> None:
    with pytest.raises(ImportError, match="pip install missingframework"):
        relight.instrument("missing")


def test_an_unknown_adapter_name_says_which_are_known(adapters: Recording) -> None:
    with pytest.raises(relight.NotFoundError, match=r"no adapter named 'nope'.*missing, recording"):
        relight.instrument("nope")


def test_guarded_logs_a_hook_error_instead_of_raising(caplog: pytest.LogCaptureFixture) -> None:
    @guarded
    def hook(value: int) -> int:
        raise RuntimeError(f"broken at {value}")

    with caplog.at_level(logging.ERROR):
        assert hook(3) is None
    (record,) = caplog.records
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "broken at 3"


def test_outside_an_attempt_no_span_is_started() -> None:
    assert start_role_span("writer", framework="test") is None
    assert start_tool_span("search", role="writer", framework="test") is None


async def test_role_and_tool_spans_reach_the_store_with_the_contract_attributes() -> None:
    store = InMemoryStore()
    batcher = SpanBatcher(store)
    tracing.install(batcher)
    try:
        (rollout,) = await store.enqueue([RolloutRequest(input="task")])
        claimed = await store.claim("worker")
        assert claimed is not None
        _, attempt = claimed
        with relight.attempt_scope(rollout.rollout_id, attempt.attempt_id):
            role = start_role_span(
                "researcher/agent", framework="test", run_id="run-1", input_messages=[{"role": "user", "content": "hi"}]
            )
            tool = start_tool_span("search", role="researcher/agent", framework="test", call_id="call_1")
        assert role is not None
        assert tool is not None
        end_tool_span(tool, success=False, error=ValueError("no results"))
        end_role_span(role, response_id="chatcmpl-1")
        await batcher.flush()
    finally:
        tracing.uninstall()
        await batcher.aclose()

    spans = {span.kind: span for span in await store.query_spans(rollout.rollout_id, attempt.attempt_id)}
    assert spans[SpanKind.ROLE].name == "chat researcher/agent"
    assert spans[SpanKind.ROLE].attributes == {
        semconv.SPAN_KIND: "role",
        semconv.ROLE: "researcher/agent",
        semconv.GEN_AI_AGENT_NAME: "agent",
        semconv.FRAMEWORK: "test",
        semconv.FRAMEWORK_RUN_ID: "run-1",
        semconv.GEN_AI_INPUT_MESSAGES: '[{"role": "user", "content": "hi"}]',
        semconv.GEN_AI_RESPONSE_ID: "chatcmpl-1",
        semconv.ROLLOUT_ID: rollout.rollout_id,
        semconv.ATTEMPT_ID: attempt.attempt_id,
    }
    tool_span = spans[SpanKind.TOOL]
    assert tool_span.attributes[semconv.TOOL_SUCCESS] is False
    assert tool_span.attributes[semconv.ERROR_TYPE] == "ValueError"
    assert tool_span.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert tool_span.status_code == "ERROR"
