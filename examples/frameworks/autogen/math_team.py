"""AutoGen AgentChat agents written as AutoGen users write them, made trainable by relight.

A team of two ``AssistantAgent``s answers an arithmetic question: the ``solver`` works it out with a
calculator tool, the ``reviewer`` approves. The same solver also runs alone. The only
relight-specific lines are ``relight.instrument("autogen")``, the model client's
``base_url``/``api_key``/``model`` taken from the ``llm`` handle, the returned reward, and each agent's
system message read as a resource (``relight.resource("solver_prompt", default=SOLVER_PROMPT)``), for
prompt optimisation (relight-apo) to improve.

Run both in dev mode (no training) against a scripted model on 127.0.0.1, or any OpenAI-compatible
endpoint::

    python examples/frameworks/autogen/math_team.py
    python examples/frameworks/autogen/math_team.py --base-url http://localhost:8000/v1 --model NAME
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import ChatAgent, TaskResult, Team
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

import relight
from relight.scripted import Reply, ScriptRequest, ToolCall, run_dev_example

SOLVER_PROMPT = "You are the solver. Use the calculator, then reply 'Answer: <number>'."
REVIEWER_PROMPT = "You are the reviewer. Check the solver's answer and reply APPROVED when it is right."

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")

    value = evaluate(ast.parse(expression, mode="eval").body)
    return str(int(value) if value == int(value) else value)


def model_client(llm: Any) -> OpenAIChatCompletionClient:
    """The agents' model client, pointed at relight's gateway for this rollout."""
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)
    return OpenAIChatCompletionClient(model=llm.model, base_url=llm.base_url, api_key=llm.api_key, model_info=info)


def solver(client: OpenAIChatCompletionClient, *, stream: bool = False) -> AssistantAgent:
    return AssistantAgent(
        "solver",
        model_client=client,
        tools=[calculator],
        system_message=relight.resource("solver_prompt", default=SOLVER_PROMPT),  # what prompt optimisation edits
        reflect_on_tool_use=True,
        model_client_stream=stream,
    )


def team(client: OpenAIChatCompletionClient, *, stream: bool = False) -> RoundRobinGroupChat:
    """solver then reviewer, until the reviewer approves."""
    reviewer = AssistantAgent(
        "reviewer",
        model_client=client,
        system_message=relight.resource("reviewer_prompt", default=REVIEWER_PROMPT),
        model_client_stream=stream,
    )
    done = TextMentionTermination("APPROVED") | MaxMessageTermination(8)
    return RoundRobinGroupChat([solver(client, stream=stream), reviewer], termination_condition=done)


def score(messages: Sequence[BaseAgentEvent | BaseChatMessage], expected: float) -> float:
    """1.0 when the solver's last answer states the expected number, else 0.0."""
    answers = [m.to_text() for m in messages if isinstance(m, BaseChatMessage) and m.source == "solver"]
    found = re.search(r"Answer:\s*(-?[\d.]+)", answers[-1]) if answers else None
    return 1.0 if found is not None and float(found.group(1)) == expected else 0.0


async def solve(
    build: Callable[[OpenAIChatCompletionClient], Team | ChatAgent], task: dict[str, Any], llm: Any
) -> float:
    """Run the team or lone agent that ``build`` makes on ``task["question"]``; score the solver's answer."""
    client = model_client(llm)
    try:
        result: TaskResult = await build(client).run(task=task["question"])
    finally:
        await client.close()
    return score(result.messages, task["answer"])


relight.instrument("autogen")


@relight.rollout
async def solve_with_team(task: dict[str, Any], llm: Any) -> float:
    """One rollout of the team on ``task["question"]``, rewarded for a correct ``task["answer"]``."""
    return await solve(team, task, llm)


@relight.rollout
async def solve_alone(task: dict[str, Any], llm: Any) -> float:
    """One rollout of the solver on its own."""
    return await solve(solver, task, llm)


# -- dev mode -------------------------------------------------------------------------------------

TASKS = [
    {"question": "What is 17 * 23?", "answer": 391},
    {"question": "What is 1024 / 8 - 28?", "answer": 100},
    {"question": "What is (6 + 9) * 12?", "answer": 180},
]


def scripted_model(request: ScriptRequest) -> Reply | str:
    """What a scripted model answers each agent, so the team runs offline: a stand-in for the policy."""
    if "reviewer" in request.system:
        return "APPROVED"
    if request.tool_results:
        return f"Answer: {request.tool_results[-1]}"
    expression = re.search(r"What is (.+)\?", request.last_user)
    return Reply(tool_calls=[ToolCall("calculator", {"expression": expression.group(1) if expression else "0"})])


if __name__ == "__main__":
    run_dev_example(solve_with_team, solve_alone, tasks=TASKS, script=scripted_model)
