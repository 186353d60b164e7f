"""While relight records, the Agents SDK's default exporter (traces to OpenAI) is off; uninstrument() restores it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agents.tracing import get_trace_provider, set_trace_processors
from agents.tracing.processors import default_processor

from relight_openai_agents import OpenAIAgentsAdapter, _exporter


def processors() -> list[Any]:
    return list(get_trace_provider()._multi_processor._processors)  # type: ignore[attr-defined]


def test_the_default_exporter_is_off_while_relight_records_and_back_after(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = OpenAIAgentsAdapter()
    was_recording = adapter.is_instrumented  # another test module may have instrumented the process
    adapter.uninstrument()
    before = processors()  # the processors already there (relight's own) stay where they are
    set_trace_processors([default_processor(), *before])
    monkeypatch.setattr(_exporter, "_told", False)
    try:
        with caplog.at_level(logging.WARNING, logger="relight_openai_agents"):
            adapter.instrument()
            assert default_processor() not in processors()
            adapter.uninstrument()
            assert processors()[0] is default_processor()
            adapter.instrument()  # a second time: still off, said no more
            assert default_processor() not in processors()
        said = [record.message for record in caplog.records if "default trace export" in record.message]
        assert len(said) == 1
        assert "uninstrument" in said[0]
        adapter.uninstrument()
        assert processors()[0] is default_processor()
        assert all(processor in processors() for processor in before)
    finally:
        adapter.uninstrument()
        set_trace_processors(before)
        if was_recording:  # leave the process as the test found it, for the test modules after this one
            adapter.instrument()
