"""What a judge sees of a LangGraph rollout: the example graph's run, rendered from the store's spans."""

from __future__ import annotations

import pytest

from relight.records import SpanKind
from relight.rewards import render_rollout
from relight.scripted import ScriptedUpstream
from relight_testing.compat_agents import run_agent
from relight_testing.examples import example_file, load_example

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

example = load_example(example_file("frameworks/langgraph/research_graph.py", near=__file__))


async def test_the_judge_sees_the_tool_call_its_result_and_the_final_answer() -> None:
    async with ScriptedUpstream(example.scripted_model) as upstream:
        run = await run_agent(
            example.research, {"question": "What is 6 * 7?", "answer": 42}, base_url=upstream.base_url, model="scripted"
        )
    assert run.of_kind(SpanKind.TOOL), "the graph ran its calculator"
    rendered = render_rollout(run.result.rollout.rollout_id, run.spans)
    assert '[assistant calls tool] calculator({"expression": "6 * 7"})' in rendered.lines
    assert "[tool result of calculator] 42" in rendered.lines
    assert rendered.final_answer == "Answer: 42"
    text = rendered.text
    assert (
        text.index("[user] What is 6 * 7?")
        < text.index("calculator(")
        < text.index("[tool result")
        < text.index("[final answer] Answer: 42")
    )
    assert "You are the researcher" not in text, "the agents' instructions are left out"
    assert len([line for line in rendered.lines if "calculator(" in line]) == 1, (
        "a message repeated in later calls shows once"
    )
