"""Install relight's tracing processor in the Agents SDK, and quiet it again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relight.tracing.instrumentation import Instrumentor
from relight_openai_agents import _exporter

if TYPE_CHECKING:
    from relight_openai_agents._processor import RelightTracingProcessor

__all__ = ["OpenAIAgentsAdapter"]


class OpenAIAgentsAdapter(Instrumentor):
    """Adds relight's processor and, while it records, takes out the SDK's default OpenAI exporter
    (see :mod:`relight_openai_agents._exporter`)."""

    framework = "openai_agents"
    _processor: RelightTracingProcessor | None = None

    def _instrument(self) -> None:
        if self._processor is None:
            try:
                from agents.tracing import add_trace_processor

                from relight_openai_agents._processor import RelightTracingProcessor
            except ImportError as error:
                raise ImportError(
                    "relight-openai-agents needs the OpenAI Agents SDK: pip install openai-agents"
                ) from error
            self._processor = RelightTracingProcessor(self.framework)
            add_trace_processor(self._processor)
        self._processor.enabled = True
        _exporter.switch_off()

    def _uninstrument(self) -> None:
        if self._processor is not None:
            self._processor.enabled = False
        _exporter.restore()
