"""The gateway against a real scripted vLLM-style server on loopback, driven by the real openai client."""

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from starlette.responses import StreamingResponse

from relight import semconv
from relight.gateway import Gateway
from relight.gateway.http.app import sse_response
from relight.records import AttemptStatus, RolloutRequest, Span
from relight.scripted import (
    Reply,
    ScriptedUpstream,
    ScriptError,
    ScriptRequest,
    ToolCall,
    encode,
    render_prompt,
    turns,
)
from relight.stores.memory import InMemoryStore
from relight.tracing.context import AttemptRef
from relight.transitions.builder import TransitionBuilder
from relight.transitions.verdicts import Note, Reason
from relight_testing.store import SETTLE

MESSAGES: Any = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hello"}]


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream
    session: AttemptRef

    def client(self, session: AttemptRef | None = None) -> openai.AsyncOpenAI:
        session = session or self.session
        base_url = self.gateway.base_url_for(session.rollout_id, session.attempt_id)
        return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)

    async def spans(self, session: AttemptRef | None = None) -> list[Span]:
        session = session or self.session
        await self.gateway.flush()
        return await self.store.query_spans(session.rollout_id, session.attempt_id)


async def start_attempts(store: InMemoryStore, count: int) -> list[AttemptRef]:
    await store.enqueue([RolloutRequest(input=i) for i in range(count)])
    sessions: list[AttemptRef] = []
    for _ in range(count):
        claimed = await store.claim("worker")
        assert claimed is not None
        sessions.append(AttemptRef(claimed[0].rollout_id, claimed[1].attempt_id))
    return sessions


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url], policy_version=7) as gateway:
        yield Setup(store, gateway, upstream, session)


async def test_chat_call_is_answered_under_a_minted_id_and_recorded_exactly(setup: Setup) -> None:
    async with setup.client() as client:
        completion = await client.chat.completions.create(model="scripted", messages=MESSAGES, temperature=0.5)
    (served,) = setup.upstream.served
    assert completion.choices[0].message.content == "hello"
    assert completion.id.startswith("chatcmpl-")
    assert completion.id != served.response_id
    assert "token_ids" not in completion.choices[0].model_dump()
    assert completion.choices[0].logprobs is None
    assert setup.upstream.requests[0]["return_token_ids"] is True
    (span,) = await setup.spans()
    attributes = span.attributes
    assert span.kind.value == "llm"
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == completion.id
    assert attributes[semconv.PROMPT_TOKEN_IDS] == encode(render_prompt(MESSAGES))
    assert attributes[semconv.RESPONSE_TOKEN_IDS] == served.token_ids
    assert attributes[semconv.RESPONSE_LOGPROBS] == served.logprobs
    assert attributes[semconv.POLICY_VERSION] == 7
    assert attributes[semconv.UPSTREAM] == setup.upstream.base_url
    assert attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.5
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == len(served.token_ids)
    assert json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES])) == MESSAGES
    assert json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))[0]["content"] == "hello"
    assert attributes[semconv.RETOKENIZED] is False
    assert span.status_code == "OK"


async def test_max_completion_tokens_and_stop_strings_are_recorded(setup: Setup) -> None:
    async with setup.client() as client:
        await client.chat.completions.create(model="scripted", messages=MESSAGES, max_completion_tokens=9, stop="\n")
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 9
    assert span.attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ["\n"]


async def test_client_that_asks_for_token_ids_and_logprobs_gets_them(setup: Setup) -> None:
    async with setup.client() as client:
        completion = await client.chat.completions.create(
            model="scripted", messages=MESSAGES, logprobs=True, extra_body={"return_token_ids": True}
        )
    (served,) = setup.upstream.served
    assert completion.model_dump()["choices"][0]["token_ids"] == served.token_ids
    assert completion.choices[0].logprobs is not None


async def test_streamed_call_gives_a_normal_stream_and_a_whole_span(setup: Setup) -> None:
    reply = Reply("Looking it up.", tool_calls=[ToolCall("search", {"q": "otters"}), ToolCall("fetch", "{}")])
    setup.upstream.script = lambda _request: reply
    async with setup.client() as client:
        stream = await client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True)
        chunks = [chunk async for chunk in stream]
    (served,) = setup.upstream.served
    assert {chunk.id for chunk in chunks} == {chunks[0].id}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Looking it up."
    assert all(chunk.usage is None for chunk in chunks)
    assert all("token_ids" not in c.choices[0].model_dump() for c in chunks if c.choices)
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == chunks[0].id
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS] == served.token_ids
    assert span.attributes[semconv.RESPONSE_LOGPROBS] == served.logprobs
    assert span.attributes[semconv.PROMPT_TOKEN_IDS] == served.prompt_token_ids
    assert span.attributes[semconv.STREAM] is True
    assert span.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == len(served.token_ids)
    (message,) = json.loads(str(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
    assert message["tool_calls"] == served.tool_calls


async def test_completions_and_models(setup: Setup) -> None:
    async with setup.client() as client:
        completion = await client.completions.create(model="scripted", prompt="abc")
        models = await client.models.list()
    assert completion.choices[0].text == "abc"
    assert completion.id.startswith("cmpl-")
    assert [model.id for model in models.data] == ["scripted"]
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
    assert span.attributes[semconv.PROMPT_TOKEN_IDS] == encode("abc")
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS] == encode("abc")


async def test_api_key_scopes_calls_on_the_plain_v1_path(setup: Setup) -> None:
    key = setup.gateway.api_key_for(setup.session.rollout_id, setup.session.attempt_id)
    async with openai.AsyncOpenAI(base_url=f"{setup.gateway.url}/v1", api_key=key, max_retries=0) as client:
        completion = await client.chat.completions.create(model="scripted", messages=MESSAGES)
        with pytest.raises(openai.AuthenticationError, match="relight attempt key"):
            await client.with_options(api_key="sk-not-ours").chat.completions.create(model="s", messages=MESSAGES)
    (span,) = await setup.spans()
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == completion.id


async def test_bad_requests_get_openai_shaped_4xx_errors(setup: Setup) -> None:
    url = setup.gateway.base_url_for(setup.session.rollout_id, setup.session.attempt_id)
    setup.gateway.max_body_bytes = 10_000
    async with httpx.AsyncClient() as http:
        cases = {
            "unknown rollout": await http.post(
                f"{setup.gateway.url}/rollouts/nope/attempts/nope-a1/v1/chat/completions", json={"messages": MESSAGES}
            ),
            "unknown attempt": await http.post(
                f"{setup.gateway.url}/rollouts/{setup.session.rollout_id}/attempts/nope/v1/chat/completions",
                json={"messages": MESSAGES},
            ),
            "malformed": await http.post(f"{url}/chat/completions", content=b'{"messages": ['),
            "not an object": await http.post(f"{url}/chat/completions", json=[1, 2]),
            "no messages": await http.post(f"{url}/chat/completions", json={"model": "m"}),
            "bad message": await http.post(
                f"{url}/chat/completions", json={"model": "m", "messages": [{"content": "x"}]}
            ),
            "n": await http.post(f"{url}/chat/completions", json={"model": "m", "messages": MESSAGES, "n": 2}),
            "oversized": await http.post(f"{url}/chat/completions", content=b" " * 20_000),
            "no route": await http.post(f"{url}/embeddings", json={}),
        }
    statuses = {name: response.status_code for name, response in cases.items()}
    assert statuses == {
        "unknown rollout": 404,
        "unknown attempt": 404,
        "malformed": 400,
        "not an object": 400,
        "no messages": 400,
        "bad message": 400,
        "n": 400,
        "oversized": 413,
        "no route": 404,
    }
    errors = {name: response.json()["error"] for name, response in cases.items()}
    assert "'nope' does not exist" in errors["unknown rollout"]["message"]
    assert errors["no messages"]["param"] == "messages"
    assert errors["bad message"]["param"] == "messages.0"
    assert "not valid JSON" in errors["malformed"]["message"]
    assert all(error["type"] == "invalid_request_error" for error in errors.values())
    assert setup.upstream.requests == []
    # Refusals of the running attempt are failed LLM spans (status and reason, nothing to train on);
    # those naming no running attempt (unknown rollout or attempt, no route) are only counted.
    spans = await setup.spans()
    assert [span.attributes[semconv.HTTP_STATUS] for span in spans] == [400, 400, 400, 400, 400, 413]
    assert all(span.status_code == "ERROR" and semconv.PROMPT_TOKEN_IDS not in span.attributes for span in spans)
    assert setup.gateway.stats.refused == 8


async def test_call_to_a_finished_attempt_is_refused(setup: Setup) -> None:
    from relight.records import AttemptStatus

    await setup.store.finish_attempt(setup.session.rollout_id, setup.session.attempt_id, AttemptStatus.SUCCEEDED)
    async with setup.client() as client:
        with pytest.raises(openai.ConflictError, match="succeeded, not running"):
            await client.chat.completions.create(model="scripted", messages=MESSAGES)


async def test_upstream_failure_is_a_502_with_the_reason_and_a_recorded_error(setup: Setup) -> None:
    def script(request: ScriptRequest) -> str:
        raise ScriptError(500 if request.last_user == "boom" else 400, f"cannot do {request.last_user}")

    setup.upstream.script = script
    async with setup.client() as client:
        with pytest.raises(openai.InternalServerError, match=r"answered 500\): cannot do boom") as raised:
            await client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "boom"}])
        with pytest.raises(openai.BadRequestError, match="cannot do this"):
            await client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "this"}])
        with pytest.raises(openai.InternalServerError, match="answered 500"):
            await client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "boom"}], stream=True
            )
    assert raised.value.status_code == 502
    spans = await setup.spans()
    assert [span.attributes[semconv.UPSTREAM_STATUS] for span in spans] == [500, 400, 500]
    assert all(span.status_code == "ERROR" for span in spans)
    assert spans[0].status_message == "cannot do boom"
    assert semconv.RESPONSE_TOKEN_IDS not in spans[0].attributes
    assert setup.gateway.stats.failed == 3


async def test_a_stream_the_upstream_breaks_off_ends_with_an_error_event_and_a_recorded_error(setup: Setup) -> None:
    setup.upstream.script = lambda _request: Reply("Sunny all week.", fail_midway="the engine died")
    chunks: list[Any] = []

    async def read_all(stream: openai.AsyncStream[Any]) -> None:
        async for chunk in stream:
            chunks.append(chunk)

    async with setup.client() as client:
        stream = await client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIError, match="the stream broke off: the engine died"):
            await read_all(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sunn"
    (span,) = await setup.spans()
    assert span.status_code == "ERROR"
    assert "the engine died" in (span.status_message or "")


async def test_sse_events_ready_together_go_out_in_one_write_and_none_waits_for_a_later_one() -> None:
    later = asyncio.Event()

    async def events() -> AsyncIterator[bytes]:
        for event in (b"first", b"a", b"b", b"c"):
            yield event
        await later.wait()
        yield b"d"

    response = await sse_response(events())
    assert isinstance(response, StreamingResponse)
    body = response.body_iterator
    assert await anext(body) == b"first"
    assert await asyncio.wait_for(anext(body), SETTLE) == b"abc"
    later.set()
    assert [part async for part in body] == [b"d"]


async def test_an_sse_stream_cut_off_midway_closes_its_events() -> None:
    stalled, closed = asyncio.Event(), asyncio.Event()

    async def events() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            yield b"a"
            stalled.set()
            await asyncio.Event().wait()  # the upstream stalls...
            yield b"never"
        finally:
            closed.set()  # ...and is let go when the client leaves

    response = await sse_response(events())
    assert isinstance(response, StreamingResponse)
    sent: list[bytes | str | memoryview] = []

    async def send() -> None:
        async for part in response.body_iterator:
            sent.append(part)

    sending = asyncio.create_task(send())
    await asyncio.wait_for(stalled.wait(), SETTLE)
    sending.cancel()  # as Starlette does when the client disconnects
    await asyncio.wait_for(closed.wait(), SETTLE)
    assert sent[0] == b"first"


class StallingUpstream:
    """Sends a stream's first chunk, then nothing more until the stream is let go."""

    name = "stalling"

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def complete(self, endpoint: Any, body: Any) -> Any:
        raise AssertionError("only streams")

    async def stream(self, endpoint: Any, body: Any) -> AsyncIterator[Any]:
        try:
            yield {"id": "up", "model": "scripted", "choices": [{"index": 0, "delta": {"content": "Sun"}}]}
            await asyncio.Event().wait()
        finally:
            self.released.set()

    async def models(self) -> list[str]:
        return ["scripted"]

    async def aclose(self) -> None:
        return None


async def test_a_client_that_leaves_midway_ends_the_stream_and_its_span_says_so() -> None:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    upstream = StallingUpstream()
    async with Gateway(store, [upstream]) as gateway:
        url = gateway.base_url_for(session.rollout_id, session.attempt_id)
        body = {"model": "scripted", "messages": MESSAGES, "stream": True}
        async with httpx.AsyncClient() as http, http.stream("POST", f"{url}/chat/completions", json=body) as response:
            first = await anext(response.aiter_lines())
        assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"]["content"] == "Sun"
        await asyncio.wait_for(upstream.released.wait(), SETTLE)  # the client has gone: the upstream is let go
        await gateway.flush()
        (span,) = await store.query_spans(session.rollout_id, session.attempt_id)
        assert gateway.in_flight == 0
    assert span.status_code == "ERROR"
    assert span.attributes[semconv.ERROR_TYPE] == "client_disconnected"


async def test_unreachable_upstream_is_a_502() -> None:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    with ScriptedUpstream() as upstream:
        dead_url = upstream.base_url
    async with Gateway(store, [dead_url]) as gateway:
        url = gateway.base_url_for(session.rollout_id, session.attempt_id)
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{url}/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert response.status_code == 502
    assert "did not answer" in response.json()["error"]["message"]


class ScriptedRetokenizer:
    """The scripted model's own tokenizer, as a server without return_token_ids would need."""

    def prompt_ids(self, messages: Sequence[Any], tools: Sequence[Any] | None) -> list[int]:
        return encode(render_prompt(messages))

    def text_ids(self, text: str) -> list[int]:
        return encode(text)


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_without_token_ids_is_retokenized_and_marked(stream: bool) -> None:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    async with (
        ScriptedUpstream(return_token_ids=False) as upstream,
        Gateway(store, [upstream.base_url], retokenizer=ScriptedRetokenizer()) as gateway,
        openai.AsyncOpenAI(
            base_url=gateway.base_url_for(session.rollout_id, session.attempt_id), api_key="x"
        ) as client,
    ):
        if stream:
            async for _chunk in await client.chat.completions.create(model="s", messages=MESSAGES, stream=True):
                pass
        else:
            await client.chat.completions.create(model="s", messages=MESSAGES)
        await gateway.flush()
    (span,) = await store.query_spans(session.rollout_id)
    assert span.attributes[semconv.RETOKENIZED] is True
    assert span.attributes[semconv.PROMPT_TOKEN_IDS] == encode(render_prompt(MESSAGES))
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS] == encode("hello")
    assert semconv.RESPONSE_LOGPROBS not in span.attributes
    assert (gateway.stats.retokenized, gateway.stats.untrainable) == (1, 0)


async def test_a_retokenized_tool_call_is_marked_inexact_and_left_out_of_training() -> None:
    """Without ids, a tool call is retokenized from its JSON, not the markup the model wrote: not exact."""
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    script = turns(Reply(tool_calls=[ToolCall("search", {"q": "otters"})]))
    async with (
        ScriptedUpstream(script, return_token_ids=False) as upstream,
        Gateway(store, [upstream.base_url], retokenizer=ScriptedRetokenizer()) as gateway,
        openai.AsyncOpenAI(
            base_url=gateway.base_url_for(session.rollout_id, session.attempt_id), api_key="x"
        ) as client,
    ):
        await client.chat.completions.create(model="s", messages=MESSAGES)
        await gateway.flush()
    (span,) = await store.query_spans(session.rollout_id)
    assert span.attributes[semconv.RETOKENIZED] is True
    assert span.attributes[semconv.RETOKENIZED_EXACT] is False
    assert span.attributes[semconv.RETOKENIZED_REASONS] == ["tool_calls_not_rendered"]
    await store.finish_attempt(session.rollout_id, session.attempt_id, AttemptStatus.SUCCEEDED)
    rollout = await store.get_rollout(session.rollout_id)
    (call,) = (await TransitionBuilder().explain(store, rollout, training=False)).calls
    assert (call.reason, call.detail) == (Reason.INEXACT, span.attributes[semconv.RETOKENIZED_MISMATCH])
    (kept,) = (await TransitionBuilder(include_inexact=True).explain(store, rollout, training=False)).calls
    assert kept.trained
    assert Note.INEXACT in kept.notes


async def test_without_token_ids_or_retokenizer_the_call_is_recorded_untrainable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    async with (
        ScriptedUpstream(return_token_ids=False) as upstream,
        Gateway(store, [upstream.base_url]) as gateway,
        openai.AsyncOpenAI(
            base_url=gateway.base_url_for(session.rollout_id, session.attempt_id), api_key="x"
        ) as client,
    ):
        await client.chat.completions.create(model="s", messages=MESSAGES)
        await gateway.flush()
    (span,) = await store.query_spans(session.rollout_id)
    assert semconv.RESPONSE_TOKEN_IDS not in span.attributes
    assert span.attributes[semconv.RETOKENIZED] is False
    assert gateway.stats.untrainable == 1
    assert "cannot be trained on" in caplog.text


async def test_each_rollout_sticks_to_one_replica() -> None:
    store = InMemoryStore()
    sessions = await start_attempts(store, 6)
    async with (
        ScriptedUpstream() as first,
        ScriptedUpstream() as second,
        Gateway(store, [first.base_url, second.base_url]) as gateway,
    ):
        for _round in range(3):
            for session in sessions:
                url = gateway.base_url_for(session.rollout_id, session.attempt_id)
                async with openai.AsyncOpenAI(base_url=url, api_key="x") as client:
                    await client.chat.completions.create(model="s", messages=MESSAGES)
        await gateway.flush()
    replicas = {}
    for session in sessions:
        spans = await store.query_spans(session.rollout_id)
        replicas[session.rollout_id] = {span.attributes[semconv.UPSTREAM] for span in spans}
    assert all(len(used) == 1 for used in replicas.values())
    assert {upstream for used in replicas.values() for upstream in used} == {first.base_url, second.base_url}
    assert len(first.requests) == len(second.requests) == 9


async def wait_until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until ``condition`` holds (each step lets pending I/O run)."""
    while not condition():  # noqa: ASYNC110 - the state is the gateway's, which offers no event for it
        await asyncio.sleep(0)


async def test_pause_drains_calls_in_flight_and_holds_new_ones() -> None:
    store = InMemoryStore()
    (session,) = await start_attempts(store, 1)
    entered, release = threading.Event(), threading.Event()

    def script(request: ScriptRequest) -> str:
        entered.set()
        release.wait()
        return "done"

    with ScriptedUpstream(script) as upstream:  # its own thread, so the script may block
        async with (
            Gateway(store, [upstream.base_url]) as gateway,
            openai.AsyncOpenAI(
                base_url=gateway.base_url_for(session.rollout_id, session.attempt_id), api_key="x"
            ) as client,
        ):
            in_flight = asyncio.create_task(client.chat.completions.create(model="s", messages=MESSAGES))
            await asyncio.to_thread(entered.wait)
            pausing = asyncio.create_task(gateway.pause())
            await wait_until(lambda: gateway.is_paused)
            assert not pausing.done()
            release.set()
            await pausing
            assert len(upstream.served) == 1
            assert gateway.in_flight == 0
            assert (await in_flight).choices[0].message.content == "done"
            held = asyncio.create_task(client.chat.completions.create(model="s", messages=MESSAGES))
            await wait_until(lambda: gateway.held == 1)
            assert len(upstream.requests) == 1
            gateway.resume()
            assert (await held).choices[0].message.content == "done"
            assert len(upstream.requests) == 2


async def test_responses_api_is_served_as_a_recorded_chat_call(setup: Setup) -> None:
    async with setup.client() as client:
        response = await client.responses.create(model="scripted", instructions="be terse", input="hello")
        stream = await client.responses.create(model="scripted", input="again", stream=True)
        events = [event async for event in stream]
    assert response.output_text == "hello"
    assert events[-1].type == "response.completed"
    spans = await setup.spans()
    assert [span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in spans] == [response.id, events[-1].response.id]
    assert [span.attributes[semconv.RESPONSE_TOKEN_IDS] for span in spans] == [encode("hello"), encode("again")]
