"""Bad input at the two HTTP boundaries, as tables of request and expected status: the gateway (OpenAI's error
shape, nothing reaches the upstream) and the store server (its JSON error shape, nothing stored). Also calls of
an attempt that has ended (409, never recorded) and relight's own tracing failing (never the agent's problem)."""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from relight import attempt_scope, emit_reward
from relight.gateway import Gateway
from relight.records import RolloutRequest
from relight.scripted import ScriptedUpstream
from relight.stores.http.server import running_server
from relight.stores.memory import InMemoryStore
from relight.tracing import otel as tracing
from relight.tracing.batcher import SpanBatcher
from relight.tracing.context import AttemptRef
from relight.tracing.hook_failures import hook_failures

MESSAGES = [{"role": "user", "content": "hi"}]
DEEP = b"[" * 100_000 + b"]" * 100_000


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    upstream: ScriptedUpstream
    session: AttemptRef

    @property
    def chat_url(self) -> str:
        return self.gateway.base_url_for(self.session.rollout_id, self.session.attempt_id) + "/chat/completions"


CONTEXT = 600
"""The scripted upstream's context, in tokens: it refuses a longer request as vLLM does, in vLLM's words."""


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="x", rollout_id="r")])
    claimed = await store.claim("w")
    assert claimed is not None
    async with ScriptedUpstream(context_length=CONTEXT) as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield Setup(store, gateway, upstream, AttemptRef("r", claimed[1].attempt_id))


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, **fields}


GATEWAY_CASES: list[tuple[str, Any, str | None]] = [
    ("temperature NaN", b'{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":NaN}', "temperature"),
    ("temperature above 2", chat(temperature=2.5), "temperature"),
    ("temperature a string", chat(temperature="hot"), "temperature"),
    ("temperature true", chat(temperature=True), "temperature"),
    ("top_p above 1", chat(top_p=1.5), "top_p"),
    ("top_p Infinity", b'{"model":"m","messages":[{"role":"user","content":"hi"}],"top_p":Infinity}', "top_p"),
    ("max_tokens 0", chat(max_tokens=0), "max_tokens"),
    ("max_tokens 1.5", chat(max_tokens=1.5), "max_tokens"),
    ("max_completion_tokens -3", chat(max_completion_tokens=-3), "max_completion_tokens"),
    ("seed beyond 64 bits", chat(seed=2**70), "seed"),
    ("seed a float", chat(seed=1.5), "seed"),
    ("stop five strings", chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    ("stop a number", chat(stop=[1]), "stop.0"),
    ("tools not a list", chat(tools={"type": "function"}), "tools"),
    ("tool of another type", chat(tools=[{"type": "retrieval"}]), "tools.0.type"),
    ("tool without a name", chat(tools=[{"type": "function", "function": {}}]), "tools.0.function.name"),
    ("unknown role", chat(messages=[{"role": "wizard", "content": "hi"}]), "messages.0.role"),
    ("content a number", chat(messages=[{"role": "user", "content": 7}]), "messages.0.content"),
    ("user content null", chat(messages=[{"role": "user", "content": None}]), "messages.0.content"),
    (
        "content part without type",
        chat(messages=[{"role": "user", "content": [{"text": "x"}]}]),
        "messages.0.content.0",
    ),
    ("stream_options a string", chat(stream=True, stream_options="x"), "stream_options"),
    ("stream a string", chat(stream="yes"), "stream"),
    ("n of 2", chat(n=2), "n"),
    ("model missing", {"messages": MESSAGES}, "model"),
    ("model an object", chat(model={}), "model"),
    ("model empty", chat(model=""), "model"),
    ("logprobs a string", chat(logprobs="x"), "logprobs"),
    ("logprobs a number", chat(logprobs=1), "logprobs"),
    ("JSON nested 100,000 deep", DEEP, None),
    ("not JSON", b"{", None),
]


@pytest.mark.parametrize(("case", "body", "param"), GATEWAY_CASES, ids=[case[0] for case in GATEWAY_CASES])
async def test_bad_requests_are_400_in_openais_shape_before_any_upstream(
    setup: Setup, case: str, body: Any, param: str | None
) -> None:
    async with httpx.AsyncClient() as http:
        if isinstance(body, bytes):
            reply = await http.post(setup.chat_url, content=body, headers={"content-type": "application/json"})
        else:
            reply = await http.post(setup.chat_url, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert setup.upstream.served == []


MALFORMED: dict[str, tuple[dict[str, Any], int, str | None]] = {
    "a text/plain body": ({"model": "m", "extra_headers": {"Content-Type": "text/plain"}}, 415, None),
    "no model": ({"model": openai.NOT_GIVEN}, 400, "model"),
    "model {}": ({"model": {}}, 400, "model"),
    "max_tokens 10^12": ({"model": "m", "max_tokens": 10**12}, 400, "max_tokens"),
    "logprobs 'x'": ({"model": "m", "logprobs": "x"}, 400, "logprobs"),
}
"""Requests the official clients send as asked: (arguments, status, the parameter the error names)."""


@pytest.mark.parametrize("case", MALFORMED)
async def test_the_openai_client_gets_a_specific_4xx_in_openais_shape(setup: Setup, case: str) -> None:
    arguments, status, param = MALFORMED[case]
    base_url = setup.chat_url.removesuffix("/chat/completions")
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **arguments)
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "invalid_request_error"  # pyright: ignore[reportUnknownMemberType]
    assert raised.value.body["param"] == param  # pyright: ignore[reportUnknownMemberType]
    if case == "max_tokens 10^12":  # the upstream said what its context is; nothing was generated
        assert f"whole context of {CONTEXT} tokens" in raised.value.message
        assert setup.upstream.served == []
    else:
        assert setup.upstream.requests == []


ANTHROPIC_MALFORMED: dict[str, tuple[dict[str, Any], int]] = {
    "a text/plain body": ({"model": "m", "extra_headers": {"Content-Type": "text/plain"}}, 415),
    "no model": ({"model": anthropic.NOT_GIVEN}, 400),
}


@pytest.mark.parametrize("case", [*ANTHROPIC_MALFORMED, "model {}"])
async def test_the_anthropic_client_gets_a_specific_4xx_in_anthropics_shape(setup: Setup, case: str) -> None:
    base_url = setup.chat_url.removesuffix("/v1/chat/completions")
    if case == "model {}":  # the client itself cannot send it (it looks the model up in a table): raw HTTP
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"{base_url}/v1/messages",
                json={"model": {}, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
                headers={"anthropic-version": "2023-06-01"},
            )
        status, body = reply.status_code, reply.json()
        expected = 400
    else:
        arguments, expected = ANTHROPIC_MALFORMED[case]
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key="unused", max_retries=0) as client:
            with pytest.raises(anthropic.APIStatusError) as raised:
                await client.messages.create(max_tokens=10, messages=[{"role": "user", "content": "hi"}], **arguments)
        status, body = raised.value.status_code, raised.value.body
    assert status == expected
    assert isinstance(body, dict)
    assert body["type"] == "error"  # pyright: ignore[reportUnknownMemberType]
    assert body["error"]["type"] == "invalid_request_error"  # pyright: ignore[reportUnknownMemberType]
    assert ("content-type" if status == 415 else "model") in body["error"]["message"]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    assert setup.upstream.requests == []


async def test_an_upstreams_own_4xx_reaches_the_client_as_that_4xx(setup: Setup) -> None:
    """Where the gateway cannot tell what is wrong (the upstream's words name no context), it defers to the upstream."""
    async with httpx.AsyncClient() as http:
        reply = await http.post(setup.chat_url, json=chat(messages=[{"role": "user", "content": "x" * CONTEXT}]))
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "context_length_exceeded"


async def test_calls_of_an_ended_attempt_are_409_and_never_recorded(setup: Setup) -> None:
    async with httpx.AsyncClient() as http:
        before = await http.post(setup.chat_url, json=chat())
        end_url = setup.gateway.base_url_for(setup.session.rollout_id, setup.session.attempt_id)[: -len("/v1")]
        ended = await http.post(end_url + "/relight/end")
        zombie = await http.post(setup.chat_url, json=chat())
    assert (before.status_code, ended.status_code, zombie.status_code) == (200, 200, 409)
    assert zombie.json()["error"]["code"] == "attempt_finished"
    await setup.gateway.flush()
    assert len(await setup.store.query_spans("r")) == 1  # the call before the end, already in the store
    assert len(setup.upstream.served) == 1


def store_cases() -> list[tuple[str, str, str, Any, int, str]]:
    span = {
        "rollout_id": "r",
        "attempt_id": "r-a1",
        "span_id": "s",
        "trace_id": "t",
        "name": "n",
        "start_time": 1,
        "end_time": 2,
        "attributes": {},
    }
    return [
        ("reward NaN", "POST", "/v1/spans", [{**span, "attributes": {"relight.reward": "NaN"}}], 422, "reward"),
        ("span of no attempt", "POST", "/v1/spans", [{**span, "attempt_id": "r-a9"}], 404, "r-a9"),
        ("span of no rollout", "POST", "/v1/spans", [{**span, "rollout_id": "nope"}], 404, "nope"),
        ("span id reused", "POST", "/v1/spans", [{**span, "span_id": "taken", "name": "other"}], 409, "taken"),
        ("input NaN", "POST", "/v1/rollouts", {"requests": [{"input": {"x": "NaN"}}]}, 422, "input.x"),
        ("resources Infinity", "POST", "/v1/resources", {"items": {"lr": "Infinity"}}, 422, "items.lr"),
        ("limit 10^30", "GET", "/v1/rollouts?limit=" + "1" + "0" * 30, None, 422, "limit"),
        ("offset 10^30", "GET", "/v1/rollouts?offset=" + "1" + "0" * 30, None, 422, "offset"),
        ("version 10^30", "GET", "/v1/resources?version=" + "1" + "0" * 30, None, 422, "version"),
        ("lease 1e308", "POST", "/v1/claim", {"worker_id": "w", "lease_seconds": 1e308}, 422, "lease_seconds"),
        (
            "finish as expired",
            "POST",
            "/v1/finish",
            {"rollout_id": "r", "attempt_id": "r-a1", "status": "expired"},
            422,
            "status",
        ),
        ("JSON nested 100,000 deep", "POST", "/v1/rollouts", DEEP, 400, "parsing the body"),
    ]


STORE_CASES = store_cases()


@pytest.mark.parametrize(
    ("case", "method", "path", "body", "status", "named"), STORE_CASES, ids=[case[0] for case in STORE_CASES]
)
async def test_bad_store_inputs_get_a_specific_4xx_in_json_and_store_nothing(
    case: str, method: str, path: str, body: Any, status: int, named: str
) -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="x", rollout_id="r")])
    await store.claim("w")
    await store.add_spans([])
    with running_server(store) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            taken = {"rollout_id": "r", "attempt_id": "r-a1", "span_id": "taken", "trace_id": "t", "name": "n"}
            await http.post("/v1/spans", json=[{**taken, "start_time": 1, "end_time": 2, "attributes": {}}])
            before = (await http.get("/v1/stats")).json()
            content = body if isinstance(body, bytes) else None if body is None else _with_nan(body)
            reply = await http.request(method, path, content=content, headers={"content-type": "application/json"})
            after = (await http.get("/v1/stats")).json()
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert named in reply.json()["detail"]
    assert after == before


def _with_nan(body: Any) -> bytes:
    """JSON with the strings "NaN" and "Infinity" written as the bare tokens Python's json (and so FastAPI) reads."""
    return json.dumps(body).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity").encode()


async def test_failing_tracing_hooks_never_reach_the_agent_or_the_gateway(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("relight's own tracing is broken")

    batcher = SpanBatcher(setup.store)
    tracing.install(batcher)
    before = sum(hook_failures().values())
    monkeypatch.setattr(tracing, "current_attempt", broken)  # a fault inside relight's hooks themselves
    try:
        with attempt_scope("r", setup.session.attempt_id):
            emit_reward(1.0)  # counted and logged, never raised into the agent
            with tracing.tracer().start_as_current_span("the agent's own span"):
                pass
        async with httpx.AsyncClient() as http:
            reply = await http.post(setup.chat_url, json=chat())
    finally:
        monkeypatch.undo()
        tracing.uninstall()
        await batcher.aclose()
    assert reply.status_code == 200
    failures = hook_failures()
    assert failures["emitting reward"] >= 1
    assert failures["StoreSpanProcessor.on_start"] >= 1
    assert sum(failures.values()) > before
