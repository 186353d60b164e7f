"""The CrewAI adapter against the conformance kit, driving the example crew (examples/frameworks/crewai).

CrewAI and the example load lazily, inside the tests: conftest.py points CrewAI's home at a
temporary folder first.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from relight import semconv
from relight.agent import LLM
from relight.records import SpanKind
from relight.scripted import Script, run_dev_example
from relight_crewai import CrewAIAdapter
from relight_testing.adapters import AdapterConformance
from relight_testing.examples import example_file, load_example

pytestmark = [
    # CrewAI's own: its lazy submodule loader, and its Agent reading fields it deprecated.
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]

COUNTRIES = ("Norway", "Peru", "Egypt", "France", "Ireland")


def example() -> ModuleType:
    return load_example(example_file("frameworks/crewai/capital_crew.py", near=__file__))


class CapitalQuestions(AdapterConformance):
    """What both suites share: the example's researcher and scripted model, asked for capitals.

    Its name does not start with ``Test``, so pytest collects only its subclasses.
    """

    adapter_name = "crewai"
    adapter = CrewAIAdapter
    tools = (("capital_of", "Researcher"),)

    def script(self) -> Script:
        return example().scripted_model

    def task(self, index: int) -> str:
        return f"What is the capital of {COUNTRIES[index % len(COUNTRIES)]}? (case {index + 1})"

    def fail_a_tool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(self, "task", lambda index: f"What is the capital of Atlantis? (case {index + 1})")

    async def test_a_failed_tool_call_is_a_failed_tool_span_of_the_calling_role(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        tool = await self.failed_tool_span(monkeypatch)
        assert tool.attributes[semconv.ERROR_TYPE] == "ValueError"
        assert "Atlantis" in (tool.status_message or "")


class TestCrewAIConformance(CapitalQuestions):
    roles = ("Researcher", "Researcher", "Writer")
    trained_role = "Writer"

    def run_sync(self, task: str, llm: LLM) -> None:
        example().build_crew(llm, task).kickoff()

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        await example().build_crew(llm, task, stream=stream).akickoff()

    async def test_role_spans_carry_the_response_id_of_their_call(self) -> None:
        for run in (await self.run_rollouts(2, "async")).runs:
            llm_ids = [span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in run.of_kind(SpanKind.LLM)]
            role_ids = [span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in run.of_kind(SpanKind.ROLE)]
            assert role_ids == llm_ids


class TestStandaloneAgentConformance(CapitalQuestions):
    """A bare ``Agent.kickoff``: unlike a crew's, it does not wait for the bus's handlers, so after_run flushes."""

    roles = ("Researcher", "Researcher")

    def run_sync(self, task: str, llm: LLM) -> None:
        example().researcher(example().crew_model(llm)).kickoff(task)

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        await example().researcher(example().crew_model(llm, stream=stream)).kickoff_async(task)

    def after_run(self) -> None:
        assert CrewAIAdapter().flush()


def test_the_example_earns_its_reward_in_dev_mode() -> None:
    app = example()
    (results,) = run_dev_example(app.answer, tasks=app.TASKS, script=app.scripted_model, argv=[])
    assert [(result.reward, result.calls, result.failed_calls) for result in results] == [(1.0, 3, 0)] * len(app.TASKS)
