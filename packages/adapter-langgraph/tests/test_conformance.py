"""The LangGraph adapter against the conformance kit, driving the example graph (examples/langgraph)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from relight.agent import LLM
from relight.testing.adapters import AdapterConformance
from relight.testing.upstream import Script
from relight_langgraph import LangGraphAdapter

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")


def _load_example() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "examples" / "langgraph" / "research_graph.py"
    spec = importlib.util.spec_from_file_location("langgraph_example_research_graph", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()


class TestLangGraphConformance(AdapterConformance):
    adapter_name = "langgraph"
    adapter = LangGraphAdapter
    roles = ("planner", "researcher/agent", "researcher/agent", "writer")
    tools = (("calculator", "researcher/agent"),)
    trained_role = "researcher/agent"

    def script(self) -> Script:
        return example.scripted_model

    def task(self, index: int) -> str:
        return f"What is {index + 2} * 7?"

    def run_sync(self, task: str, llm: LLM) -> None:
        example.build_graph(example.chat_model(llm)).invoke({"messages": [("user", task)]})

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        graph = example.build_graph(example.chat_model(llm, streaming=stream))
        await graph.ainvoke({"messages": [("user", task)]})
