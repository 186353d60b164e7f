"""CrewAI against the real SmolLM2-135M-Instruct served by relight-torch: an agent's tool round trip.

CrewAI always asks with ``tool_choice: auto``, and SmolLM2 (no tools in its template) does not pick
a tool by itself, so the server runs with ``--force-first-tool-call``: the agent's first call is
decoded as ``required`` (relight-torch enforces it with a grammar), and the model answers freely
once the tool's result is in the messages. The crew is CrewAI's as a user writes it: its agent calls
``add`` natively, sends the model the turn that called it (``content: null``) and the tool's result,
and the model's answer is the task's output.
"""

from __future__ import annotations

import pytest

from relight.agent import LLM, rollout
from relight_crewai import CrewAIAdapter
from relight_testing.compat_agents import FORCED_TOKENS, ROUND_TRIP_TASK, check_tool_round_trip, run_agent
from relight_testing.models import Served

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

    @tool("add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = CrewLLM(
        model=f"openai/{llm.model}",
        base_url=llm.base_url,
        api_key=llm.api_key,
        max_tokens=FORCED_TOKENS,
        temperature=0,
    )
    agent = Agent(
        role="Adder", goal="Add numbers with the add tool.", backstory="You use tools.", llm=model, tools=[add]
    )
    crew = Crew(agents=[agent], tasks=[Task(description=task, expected_output="The sum.", agent=agent)])
    output = await crew.akickoff()
    assert output.raw  # the model's answer after the tool's result
    return 1.0


@pytest.fixture(autouse=True)
def instrumented() -> None:
    CrewAIAdapter().instrument()


async def test_agent_tool_round_trip(smollm2_tool_server: Served) -> None:
    served = smollm2_tool_server
    run = await run_agent(adder, ROUND_TRIP_TASK, base_url=served.base_url, model=served.model)
    check_tool_round_trip(run, served.reference, role="Adder", answered=True)
