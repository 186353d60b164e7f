"""An AutoGen Swarm handoff is a span of its own: ``triage`` hands the question to ``math``, which uses a tool."""

from __future__ import annotations

from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import Swarm
from autogen_core.models import ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from relight import semconv
from relight.agent import LLM
from relight.records import SpanKind
from relight.scripted import Reply, Script, ScriptRequest, ToolCall
from relight_autogen import AutoGenAdapter
from relight_testing.adapters import AdapterConformance

TRIAGE = "You are triage. Hand every math question to math."
MATH = "You are math. Use the calculator, then answer and say DONE."


def calculator(expression: str) -> str:
    """Add up the whole numbers of ``expression`` (``2+3``)."""
    return str(sum(int(part) for part in expression.split("+")))


def scripted_model(request: ScriptRequest) -> Reply | str:
    if "You are math" in request.system:
        if "calculator" in request.tool_names and not any("=" in r or r.isdigit() for r in request.tool_results):
            return Reply(tool_calls=[ToolCall("calculator", {"expression": "2+3"})])
        return f"The answer is {request.tool_results[-1] if request.tool_results else '5'}. DONE"
    return Reply(tool_calls=[ToolCall("transfer_to_math", {})])


class TestAutoGenSwarmHandoff(AdapterConformance):
    adapter_name = "autogen"
    adapter = AutoGenAdapter
    roles = ("triage", "math", "math")
    tools = (("transfer_to_math", "triage"), ("calculator", "math"))  # AutoGen hands off through a tool call
    handoffs = (("triage", "math"),)
    modes = ("async",)
    rollouts_at_once = 2

    def script(self) -> Script:
        return scripted_model

    def task(self, index: int) -> str:
        return f"What is 2+3? (question {index})"

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        info = ModelInfo(
            vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
        )
        client: Any = OpenAIChatCompletionClient(
            model=llm.model, base_url=llm.base_url, api_key=llm.api_key, model_info=info
        )
        try:
            triage = AssistantAgent("triage", model_client=client, system_message=TRIAGE, handoffs=["math"])
            math = AssistantAgent("math", model_client=client, system_message=MATH, tools=[calculator])
            done = TextMentionTermination("DONE") | MaxMessageTermination(10)
            await Swarm([triage, math], termination_condition=done).run(task=task)
        finally:
            await client.close()


async def test_the_handoff_span_names_both_agents() -> None:
    batch = await TestAutoGenSwarmHandoff().run_rollouts(1, "async")
    (run,) = batch.runs
    (handoff,) = run.of_kind(SpanKind.HANDOFF)
    assert (handoff.attributes[semconv.HANDOFF_FROM], handoff.attributes[semconv.HANDOFF_TO]) == ("triage", "math")
