"""AutoGen AgentChat against the real SmolLM2-135M-Instruct served by relight-torch: an agent's tool round trip.

``AssistantAgent`` always asks with ``tool_choice: auto``, and SmolLM2 (no tools in its template)
does not pick a tool by itself, so the model client forces one through ``extra_body`` (relight-torch
enforces it with a grammar). The agent may call tools twice (``max_tool_iterations=2``): its second
call sends the model the turn that called ``add`` (``content: null``) and the tool's result.
"""

from __future__ import annotations

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from relight.agent import LLM, rollout
from relight.testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_autogen import AutoGenAdapter
from relight_torch.testing import Served

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
        extra_body={"tool_choice": "required"},  # type: ignore[typeddict-unknown-key]
    )
    agent = AssistantAgent("adder", model_client=client, tools=[add], max_tool_iterations=2)
    await agent.run(task=task)
    await client.close()
    return 1.0


@pytest.fixture(autouse=True)
def instrumented() -> None:
    AutoGenAdapter().instrument()


async def test_assistant_agent_tool_round_trip(smollm2_server: Served) -> None:
    run = await run_agent(adder, ROUND_TRIP_TASK, base_url=smollm2_server.base_url, model=smollm2_server.model)
    check_tool_round_trip(run, smollm2_server.reference, role="adder")
