"""A math agent with a calculator, in AutoGen AgentChat: the Calc-X scenario of the Agent Lightning paper.

One ``AssistantAgent``, the ``solver``, reads an arithmetic word problem, calls the ``calculator``
tool for each step (up to three rounds) and ends with ``Answer: <number>``. The reward is 1.0 when
that number is the problem's result. Everything below is ordinary AutoGen; the relight-specific
lines are ``relight.instrument("autogen")``, the model client's ``base_url``/``api_key``/``model``
taken from the ``llm`` handle, the returned reward, and the solver's system prompt read as a resource
(``relight.resource``), which prompt optimisation improves (README.md: APO, then RL).

Commands (see README.md)::

    python examples/scenarios/calc_agent/calc_agent.py                       # dev mode, scripted model, offline
    python examples/scenarios/calc_agent/calc_agent.py --base-url URL --model NAME   # dev mode, any endpoint
    python examples/scenarios/calc_agent/calc_train.py --out runs/calc       # RL on the CPU with SmolLM2-135M
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage
from autogen_core.models import ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

import relight

SYSTEM_PROMPT = (
    "You solve math word problems. Call the calculator for every arithmetic step. "
    "When you know the result, reply with 'Answer: <number>' and nothing else."
)
MAX_TOOL_ROUNDS = 3
"""Calculator rounds a solution may take; the model call after the last one must answer."""
MAX_TOKENS = 64

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_ANSWER = re.compile(r"Answer:\s*\$?\s*(-?[\d,]*\.?\d+)")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. '12 * (3 + 4)'."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")

    value = evaluate(ast.parse(expression.replace(",", ""), mode="eval").body)
    return str(int(value) if float(value).is_integer() else round(value, 6))


def model_client(llm: Any, *, temperature: float = 1.0) -> OpenAIChatCompletionClient:
    """The solver's model client, pointed at relight's gateway for this rollout."""
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)
    return OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.base_url,
        api_key=llm.api_key,
        model_info=info,
        temperature=temperature,
        max_tokens=MAX_TOKENS,
    )


def build_solver(client: OpenAIChatCompletionClient) -> AssistantAgent:
    """The solver: its answer is a model call that sees the calculator and chooses not to use it.

    One iteration more than the calculator rounds, and no reflection: with ``reflect_on_tool_use``
    a solver that was still calling the calculator when the rounds ran out got one more call
    without the tool, and answered there. Training then rewarded calling to the limit (a one-step
    problem computed three times, then answered in the reflection) and taught the model to never
    stop by itself. Here a solver that runs out of rounds ends on a tool result, which is no answer.
    """
    return AssistantAgent(
        "solver",
        model_client=client,
        tools=[calculator],
        system_message=relight.resource("system_prompt", default=SYSTEM_PROMPT),  # prompt optimisation edits it
        max_tool_iterations=MAX_TOOL_ROUNDS + 1,
        reflect_on_tool_use=False,
    )


def final_answer(text: str) -> float | None:
    """The number after the last ``Answer:`` in ``text``; None when there is none."""
    found = _ANSWER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def reward(messages: Sequence[BaseAgentEvent | BaseChatMessage], expected: float) -> float:
    """1.0 when the solver's last message states ``expected`` as its answer, else 0.0."""
    said = [m.to_text() for m in messages if isinstance(m, BaseChatMessage) and m.source == "solver"]
    answer = final_answer(said[-1]) if said else None
    return 1.0 if answer is not None and abs(answer - expected) < 1e-6 * max(1.0, abs(expected)) else 0.0


relight.instrument("autogen")


@relight.rollout
async def solve(task: dict[str, Any], llm: Any) -> float:
    """Solve ``task["question"]``; rewarded 1.0 for ``task["answer"]``. ``task["temperature"]``: sampling."""
    client = model_client(llm, temperature=task.get("temperature", 1.0))
    try:
        result = await build_solver(client).run(task=task["question"])
    finally:
        await client.close()
    return reward(result.messages, task["answer"])


if __name__ == "__main__":
    from calc_data import load
    from calc_scripted import scripted_model

    from relight.scripted import run_dev_example

    run_dev_example(solve, tasks=load("test")[:6], script=scripted_model)
