"""A scripted stand-in for the crew's model: offline dev mode, tests, and warm-start demonstrations.

The analyst folds the problem's Calc-X chain into one expression (``24 * 42 - 89`` for "24 boxes of
42 books, 89 damaged"), sends it to the calculator once and writes ``The result is <n>.``; the
reporter copies that result as ``Answer: <n>``.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

from relight.scripted import Reply, ScriptRequest, ToolCall

PROBLEMS = Path(__file__).parents[1] / "calc_agent" / "data"
_STEP = re.compile(r'<gadget id="calculator">(.*?)</gadget>\s*<output>(.*?)</output>')


def one_expression(chain: str) -> str | None:
    """The chain's calculator steps folded into one expression, e.g. ``24 * 42 - 89``; None without steps.

    Where a later step uses an earlier step's output (``24 * 42`` → 1008, then ``1008 - 89``), the
    output is replaced by that step's expression, and Python's parser keeps only the parentheses
    the order of operations needs.
    """
    folded: list[tuple[str, str]] = []
    for expression, output in _STEP.findall(chain):
        for value, earlier in reversed(folded):
            expression = re.sub(rf"(?<![\d.]){re.escape(value)}(?![\d.])", f"({earlier})", expression, count=1)
        folded.append((output.strip(), expression))
    return ast.unparse(ast.parse(folded[-1][1], mode="eval")) if folded else None


@functools.cache
def _solutions() -> dict[str, tuple[str | None, str]]:
    solutions: dict[str, tuple[str | None, str]] = {}
    for split in ("train", "test"):
        for record in map(json.loads, (PROBLEMS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()):
            solutions[record["question"]] = (one_expression(record["chain"]), record["result"])
    return solutions


def _problem(text: str) -> tuple[str | None, str]:
    return next((solution for question, solution in _solutions().items() if question in text), (None, "0"))


def scripted_model(request: ScriptRequest) -> Reply | str:
    """Analyst: one calculator call, then the result; Reporter: the result as the answer."""
    prompt = "\n".join(str(m.get("content") or "") for m in request.messages)
    if "Analyst" in request.system:
        expression, result = _problem(prompt)
        called = any(m.get("role") == "tool" for m in request.messages)
        if expression is not None and not called:
            return Reply(tool_calls=[ToolCall("calculator", {"expression": expression})])
        return f"The result is {result}."
    found = re.findall(r"The result is (-?[\d.]+)", prompt)
    return f"Answer: {found[-1] if found else 'unknown'}"
