"""The Agents SDK example reads each agent's instructions as a resource: the published version, else its default."""

from __future__ import annotations

from relight_testing.examples import example_file, load_example
from relight_testing.resources import check_published_prompt_is_used

example = load_example(example_file("frameworks/openai_agents/weather_desk.py", near=__file__))


async def test_the_forecaster_reads_its_published_instructions_and_its_default_without_them() -> None:
    await check_published_prompt_is_used(
        example.forecast,
        example.TASKS[0],
        script=example.scripted_model,
        name="forecaster_prompt",
        published="You are the forecaster. Always call get_forecast, then answer in one short sentence.",
        default=example.FORECASTER_PROMPT,
    )


async def test_the_triage_agent_speaking_the_responses_api_reads_its_published_instructions() -> None:
    await check_published_prompt_is_used(
        example.forecast,
        example.TASKS[1],
        script=example.scripted_model,
        name="triage_prompt",
        published="You are the triage agent. Send each weather question to the forecaster at once.",
        default=example.TRIAGE_PROMPT,
    )
