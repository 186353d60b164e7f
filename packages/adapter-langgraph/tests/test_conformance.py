"""The LangGraph adapter against the conformance kit, driving the example graph (examples/langgraph)."""

from __future__ import annotations

import pytest

from relight import semconv
from relight.agent import LLM
from relight.models import RolloutStatus, SpanKind
from relight.testing.adapters import AdapterConformance
from relight.testing.examples import example_file, load_example
from relight.testing.upstream import Reply, Script, ScriptRequest, ToolCall
from relight_langgraph import LangGraphAdapter

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")


example = load_example(example_file("langgraph/research_graph.py", near=__file__))


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

    async def test_a_failed_tool_call_is_a_failed_tool_span_of_the_calling_role(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def wrong_arguments(request: ScriptRequest) -> Reply | str:
            if "researcher" in request.system and not request.tool_results:
                return Reply(tool_calls=[ToolCall("calculator", {"formula": "2 * 7"})])
            return example.scripted_model(request)

        monkeypatch.setattr(self, "script", lambda: wrong_arguments)
        (run,) = (await self.run_rollouts(1, "async")).runs
        assert run.rollout.status is RolloutStatus.SUCCEEDED, run.rollout.error
        (tool,) = run.of_kind(SpanKind.TOOL)
        assert tool.attributes[semconv.TOOL_SUCCESS] is False
        assert tool.attributes[semconv.ROLE] == "researcher/agent"
        assert tool.status_code == "ERROR"
