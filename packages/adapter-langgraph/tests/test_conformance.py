"""The LangGraph adapter against the conformance kit, driving the example graph (examples/frameworks/langgraph)."""

from __future__ import annotations

import pytest

from relight.agent import LLM
from relight.scripted import Reply, Script, ScriptRequest, ToolCall
from relight_langgraph import LangGraphAdapter
from relight_testing.adapters import AdapterConformance
from relight_testing.examples import example_file, load_example

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")


example = load_example(example_file("frameworks/langgraph/research_graph.py", near=__file__))


class TestLangGraphConformance(AdapterConformance):
    adapter_name = "langgraph"
    adapter = LangGraphAdapter
    roles = ("planner", "researcher/agent", "researcher/agent", "writer")
    tools = (("calculator", "researcher/agent"),)
    handoffs = (("planner", "researcher/agent"), ("researcher/agent", "writer"))
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

    def fail_a_tool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def wrong_arguments(request: ScriptRequest) -> Reply | str:
            if "researcher" in request.system and not request.tool_results:
                return Reply(tool_calls=[ToolCall("calculator", {"formula": "2 * 7"})])
            return example.scripted_model(request)

        monkeypatch.setattr(self, "script", lambda: wrong_arguments)
