"""The calculator task (Calc-X in miniature): questions, the tool, the reward and demonstrations.

A question asks for the product of two two-digit numbers. A model can call the calculator and
copy its result, or answer from memory; the tiny model's memory is poor at multiplication, so the
tool is the way to the reward, and RL has to discover that from a warm start that mostly skips it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "TOOLS",
    "Problem",
    "Split",
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
Split = Literal["train", "eval"]
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


def problems(count: int, *, seed: int, split: Split = "train") -> list[Problem]:
    """``count`` random products of two numbers from 32 to 99 (so four-digit results), reproducible from ``seed``.

    Products because a model this small cannot learn to multiply from examples (it does learn to
    add: digit-aligned sums are easy), so answering from memory stays poor and the calculator is
    the way to the reward. Four-digit results because such a model copies numbers by their
    distance from where they appear: one length means one distance to learn. A tenth of the
    products are kept for evaluation (``split="eval"``) and never drawn for training, so the
    evaluation measures the skill, not memory.
    """
    rng = random.Random(seed)
    drawn: list[Problem] = []
    while len(drawn) < count:
        problem = Problem(rng.randint(32, 99), "*", rng.randint(32, 99))
        if _split_of(problem) == split:
            drawn.append(problem)
    return drawn


def _split_of(problem: Problem) -> Split:
    return "eval" if (problem.a * 7 + problem.b * 13) % 10 == 0 else "train"


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
