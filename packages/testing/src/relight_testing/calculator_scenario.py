"""A calculator agent whose every rollout is known in advance: for tests of what is done with a finished run.

Each task asks ``What is <a> * 7?``; the agent sends its sample number along (from its rollout id,
``<run>-<group>-s<n>``), and :func:`script` answers each (task, sample) as :data:`BEHAVIOURS` says: through
the calculator tool and then the right answer (``tool``), the right answer at once (``right``), a wrong one
(``wrong``) or nothing (``empty``). The agent runs the tool itself, recording a tool span as an adapter
would, and returns the reward the scenario was trained with: 1.0 for the right number, else 0.0.
:func:`verified_reward` is a changed reward over the recorded rollout (a right answer counts only when the
calculator was used) that raises on an empty answer, so a test can work out by hand what it changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import openai
from pydantic import JsonValue

from relight.agent import LLM, FunctionAgent
from relight.rewards.recorded import RecordedRollout
from relight.scripted.scripts import Reply, ScriptError, ScriptRequest, ToolCall
from relight.tracing.agent_spans import end_tool_span, start_tool_span
from relight.tracing.context import current_attempt

__all__ = [
    "BEHAVIOURS",
    "SAMPLES",
    "TOOLS",
    "calculate",
    "calculator_agent",
    "make_agent",
    "script",
    "tasks",
    "verified_reward",
]

SAMPLES = 3
BEHAVIOURS: dict[int, tuple[str, str, str]] = {
    2: ("tool", "tool", "right"),
    3: ("right", "wrong", "right"),
    4: ("tool", "wrong", "wrong"),
    5: ("right", "right", "right"),
    6: ("right", "tool", "wrong"),
    7: ("tool", "empty", "wrong"),
}
"""What the model does in each sample of each task, by the task's ``a``."""

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
_ASKED = re.compile(r"What is (\d+) \* 7\? \(sample (\d+)\)")
_SAMPLE = re.compile(r"-s(\d+)\b")
"""A training rollout's sample number in its id (``<run>-<group>-s<n>``, a replay's id going on after it)."""


def tasks() -> list[JsonValue]:
    return [{"a": a, "answer": a * 7} for a in BEHAVIOURS]


def script(request: ScriptRequest) -> Reply | str:
    """The scripted model's reply to the agent's request, as :data:`BEHAVIOURS` says."""
    found = _ASKED.search(str(request.messages[0].get("content", ""))) if request.messages else None
    if found is None:
        raise ScriptError(400, "not a calculator scenario request")
    a, sample = int(found.group(1)), int(found.group(2))
    behaviour = BEHAVIOURS[a][sample]
    if request.turn == 0 and behaviour == "tool":
        return Reply(tool_calls=[ToolCall("calculator", {"expression": f"{a} * 7"}, id=f"call-{a}-{sample}")])
    return {"tool": str(a * 7), "right": str(a * 7), "wrong": str(a * 7 + 1), "empty": ""}[behaviour]


def calculate(expression: str) -> str:
    """The calculator tool: ``<a> * <b>``."""
    left, right = expression.split("*")
    return str(int(left) * int(right))


def make_agent(tool: Callable[[str], str] = calculate) -> FunctionAgent:
    """The scenario's agent, running ``tool`` for the calculator (another tool makes a changed agent)."""

    def calculator_agent(task: Mapping[str, Any], llm: LLM) -> float:
        """Ask, run the calculator if the model calls it, ask again with its result; 1.0 for the right number."""
        attempt = current_attempt()
        numbered = _SAMPLE.search(attempt.rollout_id) if attempt is not None else None
        sample = numbered.group(1) if numbered is not None else "0"
        messages: list[Any] = [{"role": "user", "content": f"What is {task['a']} * 7? (sample {sample})"}]
        with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            reply = client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS).choices[0].message
            for call in reply.tool_calls or []:
                arguments = str(call.function.arguments)  # pyright: ignore[reportAttributeAccessIssue]
                span = start_tool_span(
                    "calculator", role="agent", framework="plain", call_id=call.id, arguments=arguments
                )
                result = tool(json.loads(arguments)["expression"])
                if span is not None:
                    end_tool_span(span, success=True, result=result)
                messages += [
                    reply.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": result},
                ]
            if reply.tool_calls:
                reply = (
                    client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS).choices[0].message
                )
        return 1.0 if (reply.content or "").strip() == str(task["answer"]) else 0.0

    return FunctionAgent(calculator_agent)


calculator_agent = make_agent()


def verified_reward(task: Mapping[str, Any], rollout: RecordedRollout) -> float:
    """The changed reward: the right number counts only when the calculator computed it. An empty answer is a
    case this reward never thought of: it raises."""
    answer = rollout.final_answer.strip()
    if not answer:
        raise ValueError("the rollout gave no answer")
    used = any(tool.name == "calculator" and tool.success for tool in rollout.tools)
    return 1.0 if used and answer == str(task["answer"]) else 0.0
