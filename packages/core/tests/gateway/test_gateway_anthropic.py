"""The gateway's Anthropic Messages API, driven by the official anthropic client against a scripted upstream."""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest

from relight import semconv
from relight.gateway import Gateway
from relight.records import RolloutRequest, Span
from relight.scripted import Reply, ScriptedUpstream, ToolCall, encode, render_prompt, turns
from relight.stores.memory import InMemoryStore
from relight.tracing.context import AttemptRef

WEATHER = {
    "name": "weather",
    "description": "Weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SCRIPT = turns(Reply("Let me look.", tool_calls=[ToolCall("weather", {"city": "Paris"}, id="toolu_1")]), "Sunny.")


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream
    session: AttemptRef

    def client(self, **options: Any) -> anthropic.AsyncAnthropic:
        base_url = self.gateway.base_url_for(self.session.rollout_id, self.session.attempt_id).removesuffix("/v1")
        return anthropic.AsyncAnthropic(base_url=base_url, api_key="unused", max_retries=0, **options)

    async def spans(self) -> list[Span]:
        await self.gateway.flush()
        return await self.store.query_spans(self.session.rollout_id, self.session.attempt_id)


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    session = AttemptRef(claimed[0].rollout_id, claimed[1].attempt_id)
    async with ScriptedUpstream(SCRIPT) as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield Setup(store, gateway, upstream, session)


async def test_tool_use_round_trip_is_translated_and_recorded_exactly(setup: Setup) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    async with setup.client() as client:
        first = await client.messages.create(
            model="scripted", max_tokens=50, system="Be brief.", messages=messages, tools=[WEATHER]
        )
        assert first.stop_reason == "tool_use"
        text, use = first.content
        assert text.type == "text" and text.text == "Let me look."  # noqa: PT018
        assert use.type == "tool_use"
        assert (use.id, use.name, use.input) == ("toolu_1", "weather", {"city": "Paris"})
        messages += [
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21C"}]},
        ]
        second = await client.messages.create(model="scripted", max_tokens=50, messages=messages, tools=[WEATHER])
    assert second.content[0].type == "text"
    assert second.content[0].text == "Sunny."
    assert second.stop_reason == "end_turn"
    chat = setup.upstream.requests[1]
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
        ],
    }
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 21C"}
    assert chat["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    spans = await setup.spans()
    assert [span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in spans] == [first.id, second.id]
    assert first.id.startswith("msg_")
    assert spans[1].attributes[semconv.PROMPT_TOKEN_IDS] == encode(render_prompt(chat["messages"]))
    assert spans[1].attributes[semconv.RESPONSE_TOKEN_IDS] == encode("Sunny.")
    assert len(spans[1].attributes[semconv.RESPONSE_LOGPROBS]) == len(encode("Sunny."))  # type: ignore[arg-type]
    assert second.usage.output_tokens == len(encode("Sunny."))


async def test_stream_gives_anthropic_events_and_the_same_message(setup: Setup) -> None:
    async with (
        setup.client() as client,
        client.messages.stream(
            model="scripted", max_tokens=50, messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER]
        ) as stream,
    ):
        kinds = [event.type async for event in stream]
        message = await stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == message.id
    assert span.attributes[semconv.STREAM] is True


async def test_errors_come_back_in_anthropic_shape(setup: Setup) -> None:
    async with setup.client() as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(
                model="scripted",
                max_tokens=10,
                messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}],
            )
    assert refused.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.0.content.0 is a 'image' block; the gateway serves text and tools only",
        },
    }
    url = setup.gateway.base_url_for(setup.session.rollout_id, setup.session.attempt_id) + "/messages"
    async with httpx.AsyncClient() as http:
        unversioned = await http.post(url, json={"model": "scripted", "max_tokens": 5, "messages": []})
    assert unversioned.status_code == 400
    assert unversioned.json()["error"]["message"] == "anthropic-version: header is required"


async def test_the_api_key_names_the_attempt_as_anthropic_clients_send_it(setup: Setup) -> None:
    key = Gateway.api_key_for(setup.session.rollout_id, setup.session.attempt_id)
    async with anthropic.AsyncAnthropic(base_url=setup.gateway.url, api_key=key, max_retries=0) as client:
        reply = await client.messages.create(
            model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == reply.id
    assert json.loads(str(span.attributes[semconv.GEN_AI_INPUT_MESSAGES])) == [{"role": "user", "content": "hi"}]
