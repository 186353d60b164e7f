"""LangChain and LangGraph against the real SmolLM2-135M-Instruct served by relight-torch: the first tool round trip.

SmolLM2's template has no tools, so each agent forces its first call's tool (``tool_choice``, which
relight-torch enforces with a grammar) and lets the model answer once the tool has: the way an
agent makes a model that does not pick tools by itself use one.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from relight.agent import LLM, rollout
from relight_langgraph import LangGraphAdapter
from relight_testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_testing.models import Served

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10"),
]
ANSWER_TOKENS = 8


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def chat_model(llm: LLM, max_tokens: int) -> ChatOpenAI:
    return ChatOpenAI(model=llm.model, base_url=llm.base_url, api_key=llm.api_key, max_tokens=max_tokens, temperature=0)


@rollout
async def bind_tools_round_trip(task: str, llm: LLM) -> float:
    """Plain LangChain: a forced ``add`` call, the tool run, then the model answers with the result."""
    messages: list[BaseMessage] = [HumanMessage(task)]
    called = await chat_model(llm, FORCED_TOKENS).bind_tools([add], tool_choice="add").ainvoke(messages)
    messages += [called, *[await add.ainvoke(call) for call in called.tool_calls]]  # type: ignore[attr-defined]
    await chat_model(llm, ANSWER_TOKENS).bind_tools([add], tool_choice="none").ainvoke(messages)
    return 1.0


@rollout
async def react_agent_round_trip(task: str, llm: LLM) -> float:
    """LangGraph's ``create_react_agent`` with a model chosen per step: ``add`` forced until the tool has answered."""
    forced = chat_model(llm, FORCED_TOKENS).bind_tools([add], tool_choice="add")
    answering = chat_model(llm, ANSWER_TOKENS).bind_tools([add], tool_choice="none")

    def model(state: dict[str, Any], runtime: Any) -> BaseChatModel:
        answered = any(isinstance(message, ToolMessage) for message in state["messages"])
        return answering if answered else forced  # type: ignore[return-value]

    await create_react_agent(model, [add]).ainvoke({"messages": [("user", task)]})
    return 1.0


@pytest.fixture(autouse=True)
def instrumented() -> None:
    # Instrumenting is global and idempotent; never uninstrument here, or every later LangGraph test in the
    # same pytest process runs without the adapter's handler (no roles on any call).
    LangGraphAdapter().instrument()


async def test_bind_tools_round_trip(smollm2_server: Served) -> None:
    run = await run_agent(
        bind_tools_round_trip, ROUND_TRIP_TASK, base_url=smollm2_server.base_url, model=smollm2_server.model
    )
    check_tool_round_trip(run, smollm2_server.reference, answered=True)


async def test_create_react_agent_round_trip(smollm2_server: Served) -> None:
    run = await run_agent(
        react_agent_round_trip, ROUND_TRIP_TASK, base_url=smollm2_server.base_url, model=smollm2_server.model
    )
    check_tool_round_trip(run, smollm2_server.reference, role="agent", answered=True)
