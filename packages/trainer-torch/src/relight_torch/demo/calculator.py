"""The calculator task (Calc-X in miniature): questions, the tool, the reward and demonstrations.

A question asks for ``a op b`` with two-digit numbers. A model can call the calculator and copy its
result, or answer from memory; the tiny model's memory is poor at arithmetic, so the tool is the
way to the reward, and RL has to discover that from a warm start that mostly skips it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TOOLS",
    "Problem",
    "answer_reward",
    "calculate",
    "demonstration",
    "problems",
]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "For example 12 * 7"}},
                "required": ["expression"],
            },
        },
    }
]
_OPERATIONS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}
_EXPRESSION = re.compile(r"\s*(-?\d+)\s*([+*-])\s*(-?\d+)\s*")
_NUMBER = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class Problem:
    """One question and its answer."""

    a: int
    op: str
    b: int

    @property
    def expression(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    @property
    def question(self) -> str:
        return f"What is {self.expression}?"

    @property
    def answer(self) -> int:
        return _OPERATIONS[self.op](self.a, self.b)

    def as_task(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer}


def problems(count: int, *, seed: int) -> list[Problem]:
    """``count`` random problems with operands from 10 to 99, reproducible from ``seed``."""
    rng = random.Random(seed)
    return [Problem(rng.randint(10, 99), rng.choice(list(_OPERATIONS)), rng.randint(10, 99)) for _ in range(count)]


def calculate(expression: str) -> str:
    """The calculator tool: ``a op b`` with integers, or a short error the model can read."""
    match = _EXPRESSION.fullmatch(expression)
    if match is None:
        return "error: expected an expression like 12 * 7"
    a, op, b = match.groups()
    return str(_OPERATIONS[op](int(a), int(b)))


def answer_reward(answer: str | None, expected: int) -> float:
    """1 when the last number in the answer is the expected one, else 0."""
    numbers = _NUMBER.findall(answer or "")
    return 1.0 if numbers and int(numbers[-1]) == expected else 0.0


def demonstration(problem: Problem, *, use_tool: bool) -> list[dict[str, Any]]:
    """A correct conversation for SFT: the tool call and its result, or the answer given directly."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": problem.question}]
    if use_tool:
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": problem.expression})},
        }
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": calculate(problem.expression)},
        ]
    messages.append({"role": "assistant", "content": str(problem.answer)})
    return messages
