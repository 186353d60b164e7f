"""What a judge sees of an Agents SDK rollout: the example's handoff and tool, rendered from the store's spans.

The triage agent speaks the Responses API and the forecaster Chat Completions; the gateway records
both as chat messages, so the judge reads one conversation either way.
"""

from __future__ import annotations

from relight.records import SpanKind
from relight.rewards import render_rollout
from relight.scripted import ScriptedUpstream
from relight_testing.compat_agents import run_agent
from relight_testing.examples import example_file, load_example

example = load_example(example_file("frameworks/openai_agents/weather_desk.py", near=__file__))


async def test_the_judge_sees_the_handoff_the_tool_call_its_result_and_the_final_answer() -> None:
    task = {"question": "What will the weather be in Oslo tomorrow?", "answer": "snowy"}
    async with ScriptedUpstream(example.scripted_model) as upstream:
        run = await run_agent(example.forecast, task, base_url=upstream.base_url, model="scripted")
    assert run.of_kind(SpanKind.TOOL), "the forecaster ran its tool"
    rendered = render_rollout(run.result.rollout.rollout_id, run.spans)
    lines = rendered.lines
    assert "[user] What will the weather be in Oslo tomorrow?" in lines
    assert "[assistant calls tool] transfer_to_forecaster({})" in lines
    assert '[assistant calls tool] get_forecast({"city": "Oslo"})' in lines
    assert "[tool result of get_forecast] snowy" in lines
    assert rendered.final_answer == "Tomorrow will be snowy in Oslo."
    text = rendered.text
    assert (
        text.index("get_forecast(") < text.index("[tool result of get_forecast] snowy") < text.index("[final answer]")
    )
