"""The AutoGen adapter against the conformance kit, driving the example agents (examples/frameworks/autogen).

The team's agents are named by their agent ids; the standalone agent, which runs outside any agent
runtime, by AutoGen's own agent span: two ways to a role, each through the whole kit.
"""

from __future__ import annotations

import asyncio

import pytest
from autogen_agentchat.base import ChatAgent, Team
from autogen_ext.models.openai import OpenAIChatCompletionClient

from relight.agent import LLM
from relight.scripted import Reply, Script, ScriptRequest, ToolCall
from relight_autogen import AutoGenAdapter
from relight_testing.adapters import AdapterConformance
from relight_testing.examples import example_file, load_example

example = load_example(example_file("frameworks/autogen/math_team.py", near=__file__))


class TestAutoGenTeamConformance(AdapterConformance):
    adapter_name = "autogen"
    adapter = AutoGenAdapter
    roles = ("solver", "solver", "reviewer")
    tools = (("calculator", "solver"),)
    trained_role = "reviewer"

    def script(self) -> Script:
        return example.scripted_model

    def task(self, index: int) -> str:
        return f"What is {index + 2} * 7?"

    def run_sync(self, task: str, llm: LLM) -> None:
        asyncio.run(self.run_async(task, llm, stream=False))

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        client = example.model_client(llm)
        try:
            await self.agent(client, stream).run(task=task)
        finally:
            await client.close()

    def agent(self, client: OpenAIChatCompletionClient, stream: bool) -> Team | ChatAgent:
        return example.team(client, stream=stream)

    def fail_a_tool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken_expression(request: ScriptRequest) -> Reply | str:
            if "calculator" in request.tool_names and not request.tool_results:
                return Reply(tool_calls=[ToolCall("calculator", {"expression": "2 *"})])
            return example.scripted_model(request)

        monkeypatch.setattr(self, "script", lambda: broken_expression)


class TestAutoGenStandaloneConformance(TestAutoGenTeamConformance):
    roles = ("solver", "solver")
    trained_role = "solver"

    def agent(self, client: OpenAIChatCompletionClient, stream: bool) -> Team | ChatAgent:
        return example.solver(client, stream=stream)
