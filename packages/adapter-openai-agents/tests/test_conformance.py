"""The OpenAI Agents SDK adapter against the conformance kit, driving examples/frameworks/openai_agents.

The triage agent speaks the Responses API and the forecaster Chat Completions, so every run covers
both: the first call joins its gateway span by response id, the others by their request messages.
"""

from __future__ import annotations

import asyncio

import pytest
from agents import Runner

from relight import semconv
from relight.agent import LLM
from relight.gateway import Gateway
from relight.records import RolloutRequest, SpanKind
from relight.scripted import Script, ScriptedUpstream, run_dev_example
from relight.stores.memory import InMemoryStore
from relight_openai_agents import OpenAIAgentsAdapter
from relight_testing.adapters import AdapterConformance
from relight_testing.examples import example_file, load_example

example = load_example(example_file("frameworks/openai_agents/weather_desk.py", near=__file__))
CITIES = list(example.FORECASTS)


class TestOpenAIAgentsConformance(AdapterConformance):
    adapter_name = "openai_agents"
    adapter = OpenAIAgentsAdapter
    roles = ("triage", "forecaster", "forecaster")
    tools = (("get_forecast", "forecaster"),)
    handoffs = (("triage", "forecaster"),)
    trained_role = "forecaster"

    def script(self) -> Script:
        return example.scripted_model

    def task(self, index: int) -> str:
        return f"What will the weather be in {CITIES[index % len(CITIES)]} on day {index + 1}?"

    def run_sync(self, task: str, llm: LLM) -> None:
        client = example.model_client(llm)
        Runner.run_sync(example.build_agents(client, llm.model), task)
        # run_sync leaves its thread's event loop open on purpose; the runner's thread is about to end.
        loop = asyncio.get_event_loop_policy().get_event_loop()
        loop.run_until_complete(client.close())
        loop.close()

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        async with example.model_client(llm) as client:
            agent = example.build_agents(client, llm.model)
            if stream:
                result = Runner.run_streamed(agent, task)
                async for _ in result.stream_events():
                    pass
            else:
                await Runner.run(agent, task)

    async def test_outside_a_rollout_the_agent_runs_as_usual(self) -> None:
        # The triage agent needs the Responses API, which the gateway serves and the scripted upstream
        # does not; so the agent calls a gateway, but from outside any rollout attempt's context.
        store = InMemoryStore()
        (rollout,) = await store.enqueue([RolloutRequest(input="outside")])
        claimed = await store.claim("test")
        assert claimed is not None
        async with ScriptedUpstream(self.script()) as upstream, Gateway(store, [upstream.base_url]) as gateway:
            base_url = gateway.base_url_for(rollout.rollout_id, claimed[1].attempt_id)
            await self.run_async(self.task(0), LLM(base_url, "unused", upstream.model), stream=False)
            await gateway.flush()
        spans = await store.query_spans(rollout.rollout_id)
        assert [span.kind for span in spans] == [SpanKind.LLM] * len(self.roles)

    async def test_responses_calls_join_by_response_id_and_chat_calls_carry_their_messages(self) -> None:
        for run in (await self.run_rollouts(2, "async")).runs:
            llm_spans, role_spans = run.of_kind(SpanKind.LLM), run.of_kind(SpanKind.ROLE)
            triage, *forecaster = role_spans
            assert triage.attributes[semconv.GEN_AI_RESPONSE_ID] == llm_spans[0].attributes[semconv.GEN_AI_RESPONSE_ID]
            for role_span, llm_span in zip(forecaster, llm_spans[1:], strict=True):
                assert semconv.GEN_AI_RESPONSE_ID not in role_span.attributes
                assert (
                    role_span.attributes[semconv.GEN_AI_INPUT_MESSAGES]
                    == llm_span.attributes[semconv.GEN_AI_INPUT_MESSAGES]
                )

    def fail_a_tool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(self, "task", lambda index: f"What will the weather be in Atlantis on day {index + 1}?")


def test_the_example_earns_its_reward_in_dev_mode() -> None:
    (results,) = run_dev_example(example.forecast, tasks=example.TASKS, script=example.scripted_model, argv=[])
    outcomes = [(result.reward, result.calls, result.failed_calls) for result in results]
    assert outcomes == [(1.0, 3, 0)] * len(example.TASKS)
