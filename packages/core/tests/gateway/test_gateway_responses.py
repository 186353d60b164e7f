"""The gateway's Responses API, driven by the real openai client against a scripted upstream on loopback."""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from relight import semconv
from relight.gateway import Gateway
from relight.records import RolloutRequest, Span
from relight.scripted import Reply, ScriptedUpstream, ScriptError, ScriptRequest, ToolCall, turns
from relight.stores.memory import InMemoryStore
from relight.tracing.context import AttemptRef

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
SCRIPT = turns(Reply("Let me look.", tool_calls=[ToolCall("lookup", {"city": "Paris"}, id="call_1")]), "Sunny.")


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream
    session: AttemptRef

    def client(self) -> openai.AsyncOpenAI:
        base_url = self.gateway.base_url_for(self.session.rollout_id, self.session.attempt_id)
        return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)

    async def spans(self) -> list[Span]:
        await self.gateway.flush()
        return await self.store.query_spans(self.session.rollout_id, self.session.attempt_id)


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="task")])
    claimed = await store.claim("worker")
    assert claimed is not None
    session = AttemptRef(claimed[0].rollout_id, claimed[1].attempt_id)
    async with ScriptedUpstream(SCRIPT) as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield Setup(store, gateway, upstream, session)


def second_turn_input(first: Any) -> list[Any]:
    """The conversation after the first reply, as an Agents SDK run sends it back."""
    call = next(item for item in first.output if item.type == "function_call")
    return [
        {"role": "user", "content": "Weather in Paris?"},
        *(item.model_dump(exclude_none=True) for item in first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24°C"},
    ]


async def test_response_is_translated_both_ways_and_recorded_under_its_id(setup: Setup) -> None:
    async with setup.client() as client:
        response = await client.responses.create(
            model="scripted", instructions="You forecast.", input="Weather in Paris?", tools=[LOOKUP], temperature=0.3
        )
    (message, call) = response.output
    assert message.type == "message"
    assert response.output_text == "Let me look."
    assert call.type == "function_call"
    assert (call.call_id, call.name, json.loads(call.arguments)) == ("call_1", "lookup", {"city": "Paris"})
    assert response.status == "completed"
    request = setup.upstream.requests[0]
    assert request["messages"] == [
        {"role": "system", "content": "You forecast."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert request["tools"][0]["function"]["name"] == "lookup"
    assert request["temperature"] == 0.3
    (served,) = setup.upstream.served
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == response.id
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS] == served.token_ids
    assert span.attributes[semconv.RESPONSE_LOGPROBS] == served.logprobs
    assert response.usage is not None
    assert response.usage.output_tokens == len(served.token_ids)


async def test_function_call_and_its_output_go_back_as_one_assistant_turn_and_a_tool_message(setup: Setup) -> None:
    async with setup.client() as client:
        first = await client.responses.create(model="scripted", input="Weather in Paris?", tools=[LOOKUP])
        second = await client.responses.create(model="scripted", input=second_turn_input(first), tools=[LOOKUP])
    assert second.output_text == "Sunny."
    assert setup.upstream.requests[1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24°C"},
    ]


async def test_streamed_response_sends_the_api_events_and_records_the_whole_call(setup: Setup) -> None:
    async with setup.client() as client:
        stream = await client.responses.create(model="scripted", input="Weather in Paris?", tools=[LOOKUP], stream=True)
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    arguments = "".join(event.delta for event in events if event.type == "response.function_call_arguments.delta")
    assert text == "Let me look."
    assert json.loads(arguments) == {"city": "Paris"}
    done = [event.item for event in events if event.type == "response.output_item.done"]
    final = events[-1].response
    assert [item.model_dump() for item in final.output] == [item.model_dump() for item in done]
    assert final.output_text == "Let me look."
    assert final.usage is not None
    (served,) = setup.upstream.served
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == final.id
    assert span.attributes[semconv.STREAM] is True
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS] == served.token_ids


async def test_attempt_key_scopes_calls_on_the_plain_v1_path(setup: Setup) -> None:
    key = Gateway.api_key_for(setup.session.rollout_id, setup.session.attempt_id)
    async with openai.AsyncOpenAI(base_url=f"{setup.gateway.url}/v1", api_key=key, max_retries=0) as client:
        response = await client.responses.create(model="scripted", input="Weather in Paris?")
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == response.id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation"),
        ({}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0]"),
        ({"input": "hi", "tools": [{"type": "local_shell"}]}, "tools[0]"),
        ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
        ({"model": "", "input": "hi"}, "model"),
    ],
)
async def test_requests_the_gateway_cannot_serve_get_a_400_naming_the_field(
    setup: Setup, body: dict[str, Any], param: str
) -> None:
    url = setup.gateway.base_url_for(setup.session.rollout_id, setup.session.attempt_id) + "/responses"
    async with httpx.AsyncClient() as http:
        reply = await http.post(url, json={"model": "scripted", **body})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert setup.upstream.requests == []


async def test_message_parts_roles_and_output_format_are_translated(setup: Setup) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    async with setup.client() as client:
        await client.responses.create(
            model="scripted",
            input=[
                {"role": "developer", "content": "Answer in JSON."},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Weather "},
                        {"type": "input_text", "text": "in Paris?"},
                    ],
                },
            ],
            text={"format": {"type": "json_schema", "name": "forecast", "schema": schema, "strict": True}},
            max_output_tokens=64,
            tool_choice={"type": "function", "name": "lookup"},
            tools=[LOOKUP],
        )
    request = setup.upstream.requests[0]
    assert request["messages"] == [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "forecast", "schema": schema, "strict": True},
    }
    assert request["max_tokens"] == 64
    assert request["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_failure_is_a_502_and_a_recorded_error(setup: Setup, stream: bool) -> None:
    def failing(request: ScriptRequest) -> str:
        raise ScriptError(500, "the model crashed")

    setup.upstream.script = failing
    async with setup.client() as client:
        with pytest.raises(openai.APIStatusError, match="the model crashed") as raised:
            await client.responses.create(model="scripted", input="Weather in Paris?", stream=stream)
    assert raised.value.status_code == 502
    (span,) = await setup.spans()
    assert span.status_code == "ERROR"


async def test_a_stream_the_upstream_breaks_off_ends_with_response_failed(setup: Setup) -> None:
    setup.upstream.script = lambda _request: Reply("Sunny all week.", fail_midway="the engine died")
    async with setup.client() as client:
        stream = await client.responses.create(model="scripted", input="Weather in Paris?", stream=True)
        events = [event async for event in stream]
    assert [event.type for event in events[:2]] == ["response.created", "response.in_progress"]
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == "Sunn"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    assert "the stream broke off: the engine died" in failed.response.error.message
    (span,) = await setup.spans()
    assert span.status_code == "ERROR"
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == failed.response.id


async def test_a_reply_cut_at_the_token_limit_is_an_incomplete_response(setup: Setup) -> None:
    setup.upstream.script = turns(Reply("Sunny and", finish_reason="length"))
    async with setup.client() as client:
        whole = await client.responses.create(model="scripted", input="Weather?", max_output_tokens=9)
        stream = await client.responses.create(model="scripted", input="Weather?", max_output_tokens=9, stream=True)
        events = [event async for event in stream]
    assert whole.status == "incomplete"
    assert whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output_text == "Sunny and"
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == "Sunny and"
