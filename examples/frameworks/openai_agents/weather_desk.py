"""An OpenAI Agents SDK app written as its users write it, made trainable by relight.

A ``triage`` agent hands weather questions off to a ``forecaster``, which looks the city up with a
tool and answers. The triage agent calls the model through the Responses API and the forecaster
through Chat Completions, both at relight's gateway: either API is recorded. The only
relight-specific lines are ``relight.instrument("openai_agents")``, the client built from the
``llm`` handle, the returned reward, and each agent's instructions read as a resource
(``relight.resource("forecaster_prompt", default=FORECASTER_PROMPT)``), for prompt optimisation to improve.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI

import relight
from relight.scripted import Reply, ScriptRequest, ToolCall, run_dev_example

TRIAGE_PROMPT = "You are the triage agent. Hand every weather question to the forecaster."
FORECASTER_PROMPT = "You are the forecaster. Look the city up with get_forecast, then answer in one sentence."

FORECASTS = {"Paris": "sunny", "Oslo": "snowy", "Lima": "foggy", "Cairo": "hot", "Dublin": "rainy"}


@function_tool
def get_forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    if city not in FORECASTS:
        raise ValueError(f"no forecast for {city!r}")
    return FORECASTS[city]


def model_client(llm: Any) -> AsyncOpenAI:
    """The agents' model client, pointed at relight's gateway for this rollout."""
    return AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)


def build_agents(client: AsyncOpenAI, model: str) -> Agent[Any]:
    """triage (Responses API) → forecaster (Chat Completions, with the forecast tool)."""
    forecaster = Agent(
        name="forecaster",
        instructions=relight.resource("forecaster_prompt", default=FORECASTER_PROMPT),  # what prompt optimisation edits
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        tools=[get_forecast],
    )
    return Agent(
        name="triage",
        instructions=relight.resource("triage_prompt", default=TRIAGE_PROMPT),
        model=OpenAIResponsesModel(model=model, openai_client=client),
        handoffs=[forecaster],
    )


def score(answer: str, expected: str) -> float:
    """1.0 when the final answer names the expected weather, else 0.0."""
    return 1.0 if expected in answer.lower() else 0.0


relight.instrument("openai_agents")


@relight.rollout
async def forecast(task: dict[str, Any], llm: Any) -> float:
    """One rollout: answer ``task["question"]``, rewarded when it names ``task["answer"]``."""
    async with model_client(llm) as client:
        result = await Runner.run(build_agents(client, llm.model), task["question"])
    return score(str(result.final_output), task["answer"])


# -- dev mode -------------------------------------------------------------------------------------

TASKS = [
    {"question": "What will the weather be in Oslo tomorrow?", "answer": "snowy"},
    {"question": "What will the weather be in Lima tomorrow?", "answer": "foggy"},
    {"question": "What will the weather be in Cairo tomorrow?", "answer": "hot"},
]


def scripted_model(request: ScriptRequest) -> Reply | str:
    """What a scripted model answers each agent, so the app runs offline: a stand-in for the policy."""
    if "triage agent" in request.system:
        return Reply(tool_calls=[ToolCall("transfer_to_forecaster")])
    city = re.search(r"weather be in (\w+)", request.last_user)
    if _last_tool_called(request.messages) == "get_forecast":
        return f"Tomorrow will be {request.tool_results[-1]} in {city.group(1) if city else 'the city'}."
    return Reply(tool_calls=[ToolCall("get_forecast", {"city": city.group(1) if city else "unknown"})])


def _last_tool_called(messages: list[Mapping[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or []
            return calls[-1]["function"]["name"] if calls else None
    return None


if __name__ == "__main__":
    run_dev_example(forecast, tasks=TASKS, script=scripted_model)
