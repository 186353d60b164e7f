"""CrewAI against the real SmolLM2-135M-Instruct served by relight-torch: an agent that calls a tool.

CrewAI always asks with ``tool_choice: auto``, and SmolLM2 (no tools in its template) does not pick a
tool by itself, so the crew's ``LLM`` forces one through ``extra_body`` (relight-torch enforces it
with a grammar). The tool's result is the agent's answer (``result_as_answer``): a forced choice on
every call would otherwise never let the agent finish, so this crew makes one call, not a round trip.
"""

from __future__ import annotations

import pytest

from relight.agent import LLM, rollout
from relight.testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_crewai import CrewAIAdapter
from relight_torch.testing import Served

pytestmark = [
    pytest.mark.slow,
    # CrewAI's own: its lazy submodule loader, and its Agent reading fields it deprecated.
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]


@rollout
async def adder(task: str, llm: LLM) -> float:
    from crewai import LLM as CrewLLM  # CrewAI loads inside the test: conftest.py gives it a home first
    from crewai import Agent, Crew, Task
    from crewai.tools import tool

    @tool("add", result_as_answer=True)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = CrewLLM(
        model=f"openai/{llm.model}",
        base_url=llm.base_url,
        api_key=llm.api_key,
        max_tokens=FORCED_TOKENS,
        temperature=0,
        extra_body={"tool_choice": "required"},
    )
    agent = Agent(
        role="Adder", goal="Add numbers with the add tool.", backstory="You use tools.", llm=model, tools=[add]
    )
    await Crew(agents=[agent], tasks=[Task(description=task, expected_output="The sum.", agent=agent)]).akickoff()
    return 1.0


@pytest.fixture(autouse=True)
def instrumented() -> None:
    CrewAIAdapter().instrument()


async def test_agent_calls_a_tool(smollm2_server: Served) -> None:
    run = await run_agent(adder, ROUND_TRIP_TASK, base_url=smollm2_server.base_url, model=smollm2_server.model)
    check_tool_round_trip(run, smollm2_server.reference, role="Adder", round_trip=False)
