"""A two-agent CrewAI crew with a calculator, on the calc_agent's Calc-X-style word problems.

The ``Analyst`` works the problem out with the ``calculator`` tool; the ``Reporter`` reads the
analyst's work and states the result on an ``Answer:`` line. The reward is 1.0 for the right
number (after ``Answer:``, else the last number the reporter wrote). Trained as one policy, only the
analyst learns (``TransitionBuilder(roles=["Analyst"])``): the reporter's calls stay in the episode but
are not updated. Trained as two policies (``relight.Trainer(policies=POLICIES)``), analyst and reporter
are each a LoRA adapter of their own, both rewarded with the crew's answer, and the reporter samples at
the task's temperature too. The relight-specific lines are ``relight.instrument("crewai")``, the ``LLM``
built from the ``llm`` handle, and the returned reward.

Commands (see README.md)::

    python examples/scenarios/math_crew/math_crew.py                            # dev mode, scripted model, offline
    python examples/scenarios/math_crew/math_crew.py --base-url URL --model NAME        # dev mode, any endpoint
    python examples/scenarios/math_crew/crew_train.py --out runs/crew           # RL on the CPU with SmolLM2-135M
    python examples/scenarios/math_crew/crew_train.py --out runs/crew2 --policies 2  # analyst, reporter: two policies
"""

from __future__ import annotations

import ast
import json
import operator
import re
from pathlib import Path
from typing import Any

from crewai import LLM, Agent, Crew, CrewOutput, Process, Task
from crewai.tools import tool

import relight

TRAINED_ROLE = "Analyst"
REPORTER_ROLE = "Reporter"
POLICIES = {"analyst": [TRAINED_ROLE], "reporter": [REPORTER_ROLE]}
"""The two policies of ``--policies 2``: one per agent of the crew."""
PROBLEMS = Path(__file__).parents[1] / "calc_agent" / "data"
"""The calc_agent's problems (Calc-X format): ``train.jsonl`` and ``test.jsonl``."""

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")
_ANSWER = re.compile(rf"Answer:\s*\$?\s*({_NUMBER.pattern})")


@tool("calculator")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. '12 * (3 + 4)'."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")

    value = evaluate(ast.parse(expression.replace(",", ""), mode="eval").body)
    return str(int(value) if float(value).is_integer() else round(value, 6))


def build_crew(llm: Any, question: str, *, temperature: float = 1.0, reporter_temperature: float = 0.0) -> Crew:
    """Analyst (with the calculator) → Reporter, in sequence, sampling at ``temperature`` and ``reporter_temperature``.

    The reporter answers greedily unless it is trained: untrained, sampling it would only add noise to
    the reward the analyst's work earns (SmolLM2 as the reporter restated the analyst's result greedily
    on both problems tried, and in 2 of 16 samples at temperature 1; see README.md). Its expected
    output names the format in words: given the placeholder ``Answer: <number>`` SmolLM2 copied ``<number>``.
    """

    def model(at: float) -> LLM:
        return LLM(
            model=f"openai/{llm.model}", base_url=llm.base_url, api_key=llm.api_key, temperature=at, max_tokens=64
        )

    analyst = Agent(
        role=TRAINED_ROLE,
        goal="Work out the number a word problem asks for: one calculator call with the whole calculation.",
        backstory="You never do arithmetic in your head.",
        llm=model(temperature),
        tools=[calculator],
        max_iter=4,
    )
    reporter = Agent(
        role=REPORTER_ROLE,
        goal="State the analyst's result.",
        backstory="You write one line.",
        llm=model(reporter_temperature),
    )
    work = Task(description=question, expected_output="The number the problem asks for.", agent=analyst)
    report = Task(
        description=f"State the result of: {question}",
        expected_output="Answer: followed by the analyst's number",
        agent=reporter,
    )
    return Crew(agents=[analyst, reporter], tasks=[work, report], process=Process.sequential)


def reward(output: CrewOutput, expected: float) -> float:
    """1.0 when the crew states ``expected``: the number after its last ``Answer:``, else its last number.

    The reporter is not trained, so the reward does not hang on its format: SmolLM2 as the reporter
    restates the analyst's ``The result is 919.`` rather than writing an ``Answer:`` line, and a
    reward that demanded the line would score the analyst's right work 0, which RL on the analyst
    cannot fix.
    """
    found = _ANSWER.findall(output.raw) or _NUMBER.findall(output.raw)
    return 1.0 if found and abs(float(found[-1].replace(",", "")) - expected) < 1e-6 * max(1.0, abs(expected)) else 0.0


def load(split: str) -> list[dict[str, Any]]:
    """The calc_agent's ``train`` or ``test`` problems as tasks ``{"question", "answer"}``."""
    lines = (PROBLEMS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [{"question": r["question"], "answer": float(r["result"])} for r in map(json.loads, lines)]


relight.instrument("crewai")


@relight.rollout
async def solve(task: dict[str, Any], llm: Any) -> float:
    """One rollout of the crew on ``task["question"]``, rewarded for ``task["answer"]``."""
    temperature = task.get("temperature", 1.0)
    reporter_temperature = temperature if "reporter" in task.get("trained_policies", []) else 0.0
    crew = build_crew(llm, task["question"], temperature=temperature, reporter_temperature=reporter_temperature)
    output = await crew.akickoff()
    return reward(output, task["answer"])


if __name__ == "__main__":
    from crew_scripted import scripted_model

    from relight.scripted import run_dev_example

    run_dev_example(solve, tasks=load("test")[:4], script=scripted_model)
