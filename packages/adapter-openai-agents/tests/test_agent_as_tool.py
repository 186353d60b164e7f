"""An agent run as another agent's tool: its calls get a nested role (``orchestrator/translator``)."""

from __future__ import annotations

from agents import Agent, OpenAIChatCompletionsModel, Runner
from openai import AsyncOpenAI

from relight.agent import LLM
from relight.scripted import Reply, Script, ScriptRequest, ToolCall
from relight_openai_agents import OpenAIAgentsAdapter
from relight_testing.adapters import AdapterConformance

ORCHESTRATOR_PROMPT = "You are the orchestrator. Have every message translated, then report the translation."
TRANSLATOR_PROMPT = "You are the translator. Translate the message into French."


def scripted_model(request: ScriptRequest) -> Reply | str:
    if "You are the translator" in request.system:
        return f"FR: {request.last_user}"
    if request.tool_results:
        return f"Done: {request.tool_results[-1]}"
    return Reply(tool_calls=[ToolCall("translate", {"input": request.last_user})])


def build_agents(client: AsyncOpenAI, model: str) -> Agent[None]:
    chat_model = OpenAIChatCompletionsModel(model=model, openai_client=client)
    translator = Agent(name="translator", instructions=TRANSLATOR_PROMPT, model=chat_model)
    return Agent(
        name="orchestrator",
        instructions=ORCHESTRATOR_PROMPT,
        model=chat_model,
        tools=[translator.as_tool(tool_name="translate", tool_description="Translate a message into French.")],
    )


class TestAgentAsToolConformance(AdapterConformance):
    adapter_name = "openai_agents"
    adapter = OpenAIAgentsAdapter
    roles = ("orchestrator", "orchestrator/translator", "orchestrator")
    tools = (("translate", "orchestrator"),)
    trained_role = "orchestrator/translator"
    modes = ("async", "stream")

    def script(self) -> Script:
        return scripted_model

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
            agent = build_agents(client, llm.model)
            if stream:
                result = Runner.run_streamed(agent, task)
                async for _ in result.stream_events():
                    pass
            else:
                await Runner.run(agent, task)
