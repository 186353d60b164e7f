"""AutoGen AgentChat against the real SmolLM2-135M-Instruct served by relight-torch: an agent's tool round trip.

``AssistantAgent`` always asks with ``tool_choice: auto``, and SmolLM2 (no tools in its template)
does not pick a tool by itself, so the server runs with ``--force-first-tool-call``: the agent's first
call is decoded as ``required`` (relight-torch enforces it with a grammar), and the model answers
freely once the tool's result is in the messages. The agent is AutoGen's as a user writes it: it
reflects on the tool's result (``reflect_on_tool_use``), a second call that sends the model the turn
that called ``add`` (``content: null``) and the tool's result, and whose text is the agent's answer.
"""

from __future__ import annotations

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core.models import ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from relight.agent import LLM, rollout
from relight_autogen import AutoGenAdapter
from relight_testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_testing.models import Served

pytestmark = pytest.mark.slow


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@rollout
async def adder(task: str, llm: LLM) -> float:
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)
    client = OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.base_url,
        api_key=llm.api_key,
        model_info=info,
        max_tokens=FORCED_TOKENS,
        temperature=0,
    )
    agent = AssistantAgent("adder", model_client=client, tools=[add], reflect_on_tool_use=True)
    result = await agent.run(task=task)
    await client.close()
    assert isinstance(result.messages[-1], TextMessage)  # the reflection's answer, not a tool call
    return 1.0


@pytest.fixture(autouse=True)
def instrumented() -> None:
    AutoGenAdapter().instrument()


async def test_assistant_agent_tool_round_trip(smollm2_tool_server: Served) -> None:
    served = smollm2_tool_server
    run = await run_agent(adder, ROUND_TRIP_TASK, base_url=served.base_url, model=served.model)
    check_tool_round_trip(run, served.reference, role="adder", answered=True)
