"""The OpenAI Agents SDK against the real SmolLM2-135M-Instruct served by relight-torch: a ``function_tool`` round trip.

On both of the SDK's models: chat completions and the Responses API (which the gateway translates).
SmolLM2's template has no tools, so the agent names its tool in ``tool_choice`` (relight-torch
enforces it with a grammar); the SDK resets the choice once the tool has run (``reset_tool_choice``),
and the second call carries the round trip. The model may call the tool again there: two turns are
all the test asks for.
"""

from __future__ import annotations

import contextlib

import pytest
from agents import (
    Agent,
    MaxTurnsExceeded,
    Model,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI

from relight.agent import LLM, FunctionAgent
from relight_openai_agents import OpenAIAgentsAdapter
from relight_testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_testing.models import Served

pytestmark = pytest.mark.slow


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_on(api: str) -> FunctionAgent:
    async def adder(task: str, llm: LLM) -> float:
        async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            model: Model = (
                OpenAIResponsesModel(llm.model, client)
                if api == "responses"
                else OpenAIChatCompletionsModel(llm.model, client)
            )
            settings = ModelSettings(tool_choice="add", max_tokens=FORCED_TOKENS, temperature=0)
            agent = Agent(
                name="adder", instructions="Add with the add tool.", model=model, tools=[add], model_settings=settings
            )
            with contextlib.suppress(MaxTurnsExceeded):  # it called add again after the round trip
                await Runner.run(agent, task, max_turns=2)
        return 1.0

    return FunctionAgent(adder, name=f"adder_{api}")


@pytest.fixture(autouse=True)
def instrumented() -> None:
    OpenAIAgentsAdapter().instrument()


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_function_tool_round_trip(smollm2_server: Served, api: str) -> None:
    run = await run_agent(agent_on(api), ROUND_TRIP_TASK, base_url=smollm2_server.base_url, model=smollm2_server.model)
    check_tool_round_trip(run, smollm2_server.reference, role="adder")
