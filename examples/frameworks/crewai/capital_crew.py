"""A CrewAI crew written as its users write it, made trainable by relight.

Two agents work one task after the other: a ``Researcher`` finds the country's capital with a
lookup tool, then a ``Writer`` states it as ``Answer: <city>``. The only relight-specific lines are
``relight.instrument("crewai")``, the ``LLM`` built from the ``llm`` handle, the returned reward, and
each agent's backstory read as a resource (``relight.resource("researcher_backstory", default=...)``), for
prompt optimisation to improve.
"""

from __future__ import annotations

import re
from typing import Any

from crewai import LLM, Agent, Crew, CrewOutput, Process, Task
from crewai.tools import tool

import relight
from relight.scripted import Reply, ScriptRequest, ToolCall, run_dev_example

RESEARCHER_BACKSTORY = "You look facts up instead of guessing."
WRITER_BACKSTORY = "You write one precise line."
CAPITALS = {"France": "Paris", "Norway": "Oslo", "Peru": "Lima", "Egypt": "Cairo", "Ireland": "Dublin"}


@tool("capital_of")
def capital_of(country: str) -> str:
    """The capital city of a country."""
    if country not in CAPITALS:
        raise ValueError(f"no capital on record for {country!r}")
    return CAPITALS[country]


def crew_model(llm: Any, *, stream: bool = False) -> LLM:
    """The crew's model, pointed at relight's gateway for this rollout."""
    return LLM(model=f"openai/{llm.model}", base_url=llm.base_url, api_key=llm.api_key, stream=stream)


def researcher(model: LLM) -> Agent:
    """Finds the capital with the lookup tool."""
    return Agent(
        role="Researcher",
        goal="Find the facts a question needs, using your tools.",
        backstory=relight.resource(
            "researcher_backstory", default=RESEARCHER_BACKSTORY
        ),  # what prompt optimisation edits
        llm=model,
        tools=[capital_of],
    )


def writer(model: LLM) -> Agent:
    """States the answer in the form the reward reads."""
    return Agent(
        role="Writer",
        goal="State the answer in the form 'Answer: <city>'.",
        backstory=relight.resource("writer_backstory", default=WRITER_BACKSTORY),
        llm=model,
    )


def build_crew(llm: Any, question: str, *, stream: bool = False) -> Crew:
    """Researcher (with the lookup tool) → Writer, in sequence."""
    model = crew_model(llm, stream=stream)
    finder, author = researcher(model), writer(model)
    research = Task(description=question, expected_output="The capital city.", agent=finder)
    answer = Task(description=f"Write the final answer to: {question}", expected_output="Answer: <city>", agent=author)
    return Crew(agents=[finder, author], tasks=[research, answer], process=Process.sequential)


def score(output: CrewOutput, expected: str) -> float:
    """1.0 when the crew's final line names the expected city, else 0.0."""
    found = re.search(r"Answer:\s*(\w+)", output.raw)
    return 1.0 if found is not None and found.group(1) == expected else 0.0


relight.instrument("crewai")


@relight.rollout
async def answer(task: dict[str, Any], llm: Any) -> float:
    """One rollout of the crew on ``task["question"]``, rewarded for naming ``task["answer"]``."""
    output = await build_crew(llm, task["question"]).akickoff()
    return score(output, task["answer"])


# -- dev mode -------------------------------------------------------------------------------------

TASKS = [
    {"question": "What is the capital of Norway?", "answer": "Oslo"},
    {"question": "What is the capital of Peru?", "answer": "Lima"},
    {"question": "What is the capital of Egypt?", "answer": "Cairo"},
]


def scripted_model(request: ScriptRequest) -> Reply | str:
    """What a scripted model answers each agent, so the crew runs offline: a stand-in for the policy."""
    if "Researcher" in request.system:
        if request.tool_results:
            return f"The capital is {request.tool_results[-1]}."
        country = re.search(r"capital of (\w+)", request.last_user)
        return Reply(tool_calls=[ToolCall("capital_of", {"country": country.group(1) if country else "unknown"})])
    found = re.search(r"The capital is (\w+)\.", request.last_user)
    return f"Answer: {found.group(1) if found else 'unknown'}"


if __name__ == "__main__":
    run_dev_example(answer, tasks=TASKS, script=scripted_model)
