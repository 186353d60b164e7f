"""What coding CLIs (Codex, Claude Code) send, served as sent: system turns anywhere, namespace and
hosted tools, the key in ``x-api-key``, refusals recorded, context overflow in each API's own words."""

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from rich.console import Console

from relight import semconv
from relight.gateway import Gateway
from relight.gateway.overflow import overflow_of
from relight.records import AttemptStatus, RolloutRequest, Span
from relight.scripted import Reply, ScriptedUpstream, ScriptRequest, ToolCall
from relight.stores.memory import InMemoryStore
from relight.tracing.context import AttemptRef
from relight.training.dev_report import dev_result, dev_table

CONTEXT = 600
"""The scripted upstream's context, in its tokens (one a character of the rendered prompt)."""


def script(request: ScriptRequest) -> Reply | str:
    """Calls the tool the request forces, else says what it saw last."""
    choice = request.body.get("tool_choice")
    if isinstance(choice, dict):
        name = str(choice["function"]["name"])  # pyright: ignore[reportUnknownArgumentType]
        return Reply(tool_calls=[ToolCall(name, {"target": "a1"}, id="call_ns")])
    return "done"


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream
    session: AttemptRef

    @property
    def base_url(self) -> str:
        return self.gateway.base_url_for(self.session.rollout_id, self.session.attempt_id)

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.base_url.removesuffix("/v1"), api_key="unused", max_retries=0)

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="unused", max_retries=0)

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
    async with (
        ScriptedUpstream(script, context_length=CONTEXT) as upstream,
        Gateway(store, [upstream.base_url]) as gateway,
    ):
        yield Setup(store, gateway, upstream, session)


# -- Anthropic: Claude Code's requests ---------------------------------------------------------------


async def test_a_system_turn_mid_conversation_is_served_and_recorded_where_it_was_sent(setup: Setup) -> None:
    messages: Any = [
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Looking."},
        {"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
        {"role": "user", "content": "Go on."},
    ]
    async with setup.anthropic() as client:
        reply = await client.messages.create(model="scripted", max_tokens=20, system="You code.", messages=messages)
    assert reply.content[0].type == "text"
    sent = [{"role": "system", "content": "You code."}, *messages[:2], {"role": "system", "content": "Answer briefly."}]
    assert setup.upstream.requests[0]["messages"] == [*sent, messages[3]]
    (span,) = await setup.spans()
    assert json.loads(str(span.attributes[semconv.GEN_AI_INPUT_MESSAGES]))[3] == sent[3]
    assert span.attributes[semconv.PROMPT_TOKEN_IDS]


async def test_the_attempt_key_in_x_api_key_scopes_a_call(setup: Setup) -> None:
    key = setup.gateway.api_key_for(setup.session.rollout_id, setup.session.attempt_id)
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    body = {"model": "scripted", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient() as http:
        reply = await http.post(f"{setup.gateway.url}/v1/messages", json=body, headers=headers)
        wrong = await http.post(f"{setup.gateway.url}/v1/messages", json=body, headers={**headers, "x-api-key": "sk-x"})
    assert reply.status_code == 200, reply.text
    assert wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == reply.json()["id"]
    assert setup.gateway.stats.refused == 1  # the wrong key: counted, and no attempt to record it on


async def test_a_tool_result_keeps_is_error(setup: Setup) -> None:
    messages: Any = [
        {"role": "user", "content": "Run it."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "x"}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "not found", "is_error": True}],
        },
    ]
    async with setup.anthropic() as client:
        await client.messages.create(model="scripted", max_tokens=10, messages=messages)
    tool = setup.upstream.requests[0]["messages"][2]
    assert tool == {"role": "tool", "tool_call_id": "t1", "content": "not found", "is_error": True}
    (span,) = await setup.spans()
    assert json.loads(str(span.attributes[semconv.GEN_AI_INPUT_MESSAGES]))[2]["is_error"] is True


async def test_a_streamed_message_start_reports_the_prompt_length(setup: Setup) -> None:
    async with (
        setup.anthropic() as client,
        client.messages.stream(
            model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hello"}]
        ) as stream,
    ):
        events = [event async for event in stream]
    start = next(event for event in events if event.type == "message_start")
    (span,) = await setup.spans()
    prompt = span.attributes[semconv.PROMPT_TOKEN_IDS]
    assert isinstance(prompt, list)
    assert start.message.usage.input_tokens == len(prompt) > 0


# -- Responses: Codex's tools ------------------------------------------------------------------------

NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close an agent.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]},
        }
    ],
}
SHELL: dict[str, Any] = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("stream", [False, True])
async def test_namespace_tools_are_flattened_and_hosted_tools_dropped_and_marked(setup: Setup, stream: bool) -> None:
    body: dict[str, Any] = {
        "model": "scripted",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "close a1"}]}],
        "tools": [SHELL, NAMESPACE, {"type": "web_search", "external_web_access": False}],
        "tool_choice": {"type": "function", "namespace": "multi_agent_v1", "name": "close_agent"},
        "stream": stream,
    }
    async with httpx.AsyncClient() as http:
        reply = await http.post(f"{setup.base_url}/responses", json=body)
    assert reply.status_code == 200, reply.text
    if stream:
        events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]
        output = next(event for event in events if event["type"] == "response.completed")["response"]["output"]
    else:
        output = reply.json()["output"]
    (call,) = output
    assert (call["type"], call["namespace"], call["name"]) == ("function_call", "multi_agent_v1", "close_agent")
    sent = setup.upstream.requests[0]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["exec_command", "multi_agent_v1__close_agent"]
    (span,) = await setup.spans()
    assert span.attributes[semconv.DROPPED_TOOLS] == ["web_search"]

    # The call goes back to the model under its qualified name.
    history = [*body["input"], call, {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]
    async with httpx.AsyncClient() as http:
        second = await http.post(f"{setup.base_url}/responses", json={**body, "input": history, "tool_choice": "auto"})
    assert second.status_code == 200, second.text
    assert setup.upstream.requests[1]["messages"][1]["tool_calls"][0]["function"]["name"] == (
        "multi_agent_v1__close_agent"
    )


@pytest.mark.parametrize(
    "choice", [{"type": "web_search"}, "required"], ids=["naming a hosted tool", "required, only hosted tools"]
)
async def test_a_request_that_forces_a_hosted_tool_is_refused(setup: Setup, choice: object) -> None:
    body = {"model": "scripted", "input": "search", "tools": [{"type": "web_search"}], "tool_choice": choice}
    async with httpx.AsyncClient() as http:
        reply = await http.post(f"{setup.base_url}/responses", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "tool_choice"
    assert "web_search" in reply.json()["error"]["message"]


async def test_a_function_call_output_without_call_id_is_refused_naming_it(setup: Setup) -> None:
    body = {
        "model": "scripted",
        "input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "output": "1"}],
    }
    async with httpx.AsyncClient() as http:
        reply = await http.post(f"{setup.base_url}/responses", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[1].call_id"
    assert setup.upstream.requests == []


# -- refusals are recorded, counted and shown --------------------------------------------------------


async def test_a_refused_request_is_a_failed_span_counted_and_shown_in_the_dev_table(setup: Setup) -> None:
    bad = {"model": "scripted", "max_tokens": 10, "messages": [{"role": "robot", "content": "hi"}]}
    async with httpx.AsyncClient() as http:
        for _ in range(3):
            reply = await http.post(
                f"{setup.base_url.removesuffix('/v1')}/v1/messages", json=bad, headers={"anthropic-version": "1"}
            )
            assert reply.status_code == 400
        chat = await http.post(f"{setup.base_url}/chat/completions", json={"model": "scripted", "messages": []})
        assert chat.status_code == 400
    spans = await setup.spans()
    assert len(spans) == 4
    assert all(span.status_code == "ERROR" and span.attributes[semconv.REFUSED] is True for span in spans)
    assert all(semconv.PROMPT_TOKEN_IDS not in span.attributes for span in spans)
    assert spans[0].attributes[semconv.HTTP_STATUS] == 400
    assert "messages.0.role" in str(spans[0].status_message)
    assert setup.gateway.stats.refused == 4
    assert setup.upstream.requests == []

    rollout = await setup.store.finish_attempt(
        setup.session.rollout_id, setup.session.attempt_id, AttemptStatus.SUCCEEDED
    )
    result = await dev_result(setup.store, rollout)
    console = Console(width=300, record=True)
    console.print(dev_table([result]))
    row = console.export_text()
    assert "4 failed call(s): 400 messages.0.role must be user, assistant or system" in row
    assert "; 400 'messages' is required" in row, "each distinct refusal is named once, with its status"


# -- context overflow ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_past_the_context_is_context_length_exceeded_in_openai_shape(setup: Setup, stream: bool) -> None:
    async with setup.openai() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "x" * CONTEXT}], stream=stream
            )
        assert raised.value.code == "context_length_exceeded"
        assert f"maximum context length is {CONTEXT} tokens" in raised.value.message
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="scripted", input="x" * CONTEXT, stream=stream)
        assert raised.value.code == "context_length_exceeded"
    spans = await setup.spans()
    assert [span.attributes[semconv.ERROR_TYPE] for span in spans] == ["context_length_exceeded"] * 2


async def test_a_prompt_past_the_context_is_prompt_too_long_in_anthropic_shape(setup: Setup) -> None:
    async with setup.anthropic() as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(
                model="scripted", max_tokens=10, messages=[{"role": "user", "content": "x" * CONTEXT}]
            )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["error"]["type"] == "invalid_request_error"  # pyright: ignore[reportUnknownMemberType]
    assert str(error["error"]["message"]).startswith("prompt is too long: ")  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    assert f"> {CONTEXT} maximum" in raised.value.message


@pytest.mark.parametrize("stream", [False, True])
async def test_an_output_budget_past_the_context_is_capped_and_marked(setup: Setup, stream: bool) -> None:
    async with setup.anthropic() as client:
        if stream:
            async with client.messages.stream(
                model="scripted", max_tokens=32000, messages=[{"role": "user", "content": "hello"}]
            ) as events:
                reply = await events.get_final_message()
        else:
            reply = await client.messages.create(
                model="scripted", max_tokens=8000, messages=[{"role": "user", "content": "hello"}]
            )
    assert reply.content[0].type == "text"
    first, capped = setup.upstream.requests
    (span,) = await setup.spans()
    prompt = span.attributes[semconv.PROMPT_TOKEN_IDS]
    assert isinstance(prompt, list)
    asked = 32000 if stream else 8000  # (the anthropic client streams anything over ~21k tokens)
    assert (first["max_tokens"], capped["max_tokens"]) == (asked, CONTEXT - len(prompt))
    assert span.attributes[semconv.MAX_TOKENS_CAPPED] == CONTEXT - len(prompt)
    assert span.attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == asked
    assert setup.gateway.stats.capped == 1


def test_vllm_overflow_messages_are_read() -> None:
    prompt = overflow_of(
        "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce"
    )
    assert prompt is not None
    assert (prompt.context_length, prompt.prompt_tokens, prompt.prompt_fits) == (4096, 5000, False)
    budget = overflow_of(
        "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 "
        "tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None"
    )
    assert budget is not None
    assert (budget.room, budget.max_tokens) == (4096 - 2778, 8000)
    assert overflow_of("temperature must be at most 2") is None


# -- the upstream report -----------------------------------------------------------------------------


async def test_a_streamed_first_call_reports_the_ids_and_logprobs_the_whole_stream_gave(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="relight.gateway.upstreams")
    async with setup.openai() as client:
        stream = await client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        _ = [chunk async for chunk in stream]
    (report,) = [record.getMessage() for record in caplog.records if " gives " in record.getMessage()]
    assert report.endswith("gives token ids: yes, prompt ids: yes, logprobs: yes")
