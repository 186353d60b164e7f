"""The LangGraph adapter: relight's callback handler in every LangChain run, switched on and off."""

from __future__ import annotations

from relight.tracing.instrumentation import Instrumentor

__all__ = ["LangGraphAdapter"]


class LangGraphAdapter(Instrumentor):
    """Records the node (or subgraph path) behind every LLM call and tool run of LangGraph and LangChain."""

    framework = "langgraph"

    def _instrument(self) -> None:
        from relight_langgraph import _handler

        _handler.attach()

    def _uninstrument(self) -> None:
        from relight_langgraph import _handler

        _handler.detach()
