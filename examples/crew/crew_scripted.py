"""A scripted stand-in for the crew's model: offline dev mode, tests, and warm-start demonstrations.

The analyst follows the problem's Calc-X chain (one calculator call per step, then ``The result
is <n>.``); the reporter copies that result as ``Answer: <n>``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from relight.testing.upstream import Reply, ScriptRequest, ToolCall

PROBLEMS = Path(__file__).parents[1] / "calc_agent" / "data"
_STEP = re.compile(r'<gadget id="calculator">(.*?)</gadget>')


@functools.cache
def _chains() -> dict[str, tuple[list[str], str]]:
    chains: dict[str, tuple[list[str], str]] = {}
    for split in ("train", "test"):
        for record in map(json.loads, (PROBLEMS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()):
            chains[record["question"]] = (_STEP.findall(record["chain"]), record["result"])
    return chains


def _problem(text: str) -> tuple[list[str], str]:
    return next((chain for question, chain in _chains().items() if question in text), ([], "0"))


def scripted_model(request: ScriptRequest) -> Reply | str:
    """Analyst: calculator calls then the result; Reporter: the result as the answer."""
    prompt = "\n".join(str(m.get("content") or "") for m in request.messages)
    if "Analyst" in request.system:
        steps, result = _problem(prompt)
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done < len(steps):
            return Reply(tool_calls=[ToolCall("calculator", {"expression": steps[done]})])
        return f"The result is {result}."
    found = re.findall(r"The result is (-?[\d.]+)", prompt)
    return f"Answer: {found[-1] if found else 'unknown'}"
