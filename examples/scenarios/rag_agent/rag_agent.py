"""A multi-hop researcher in the OpenAI Agents SDK: the MuSiQue scenario of the Agent Lightning paper.

One ``Agent``, the ``researcher``, answers a two-hop question by calling its ``search`` tool (BM25
over the task's corpus) as often as it needs, then replies ``Answer: <answer>``. The reward is the
token F1 of that answer against the gold answer (MuSiQue's metric; exact match is F1 = 1).
The relight-specific lines are ``relight.instrument("openai_agents")``, the client built from the
``llm`` handle, the returned reward, and the researcher's instructions read as a resource
(``relight.resource``), which prompt optimisation improves.

Commands (see README.md)::

    python examples/scenarios/rag_agent/rag_agent.py                       # dev mode, scripted model, offline
    python examples/scenarios/rag_agent/rag_agent.py --base-url URL --model NAME   # dev mode, any endpoint
    python examples/scenarios/rag_agent/rag_train.py --out runs/rag        # RL on the CPU with SmolLM2-135M
"""

from __future__ import annotations

import re
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI
from rag_data import best_f1, index_of

import relight

INSTRUCTIONS = (
    "You answer questions by searching a knowledge base. Call search with a few words, read the "
    "articles, search again for what the first article names, then reply 'Answer: <answer>' with "
    "only the answer."
)
MAX_TURNS = 5
_ANSWER = re.compile(r"Answer:\s*(.+)", re.IGNORECASE)


def search_tool(corpus: str) -> FunctionTool:
    """The ``search`` tool over one corpus (a JSONL of articles, or a MuSiQue file's paragraphs)."""

    @function_tool
    def search(query: str) -> str:
        """Search the knowledge base; returns the three best articles as 'title: text' lines."""
        found = index_of(corpus).search(query, k=3)
        return "\n".join(f"{doc.title}: {doc.text}" for doc in found) if found else "No article matches."

    return search


def build_researcher(client: AsyncOpenAI, model: str, corpus: str, *, temperature: float = 1.0) -> Agent[Any]:
    return Agent(
        name="researcher",
        instructions=relight.resource("system_prompt", default=INSTRUCTIONS),  # prompt optimisation edits it
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        model_settings=ModelSettings(temperature=temperature, max_tokens=48),
        tools=[search_tool(corpus)],
    )


def final_answer(output: str) -> str:
    """The text after the last ``Answer:``, up to the end of its line (the whole output without one)."""
    found = _ANSWER.findall(output)
    return found[-1].strip().rstrip(".") if found else output.strip()


relight.instrument("openai_agents")


@relight.rollout
async def research(task: dict[str, Any], llm: Any) -> float:
    """Answer ``task["question"]`` from ``task["corpus"]``; rewarded with its F1 against ``task["answer"]``."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        researcher = build_researcher(client, llm.model, task["corpus"], temperature=task.get("temperature", 1.0))
        try:
            result = await Runner.run(researcher, task["question"], max_turns=MAX_TURNS)
        except MaxTurnsExceeded:
            return 0.0
    return best_f1(final_answer(str(result.final_output)), [task["answer"], *task.get("aliases", [])])


if __name__ == "__main__":
    from rag_data import load
    from rag_scripted import scripted_model

    from relight.scripted import run_dev_example

    run_dev_example(research, tasks=load("dev")[:6], script=scripted_model)
