"""The scripted upstream is a faithful vLLM-dialect server: every other loop test leans on it."""

from typing import Any

import httpx
import openai
import pytest

from relight.scripted import (
    Reply,
    ScriptedUpstream,
    ScriptError,
    ScriptRequest,
    ToolCall,
    by_system_prompt,
    encode,
    logprob_of,
    render_prompt,
    turns,
)

VLLM = {"return_token_ids": True}


def _client(upstream: ScriptedUpstream) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x")


async def test_chat_reply_carries_known_token_ids_and_logprobs() -> None:
    async with ScriptedUpstream() as upstream, _client(upstream) as client:
        messages: Any = [{"role": "user", "content": "héllo"}]
        completion = await client.chat.completions.create(
            model="scripted", messages=messages, logprobs=True, top_logprobs=2, extra_body=VLLM
        )
    raw = completion.model_dump()
    assert completion.choices[0].message.content == "héllo"
    assert raw["choices"][0]["token_ids"] == encode("héllo")
    assert raw["prompt_token_ids"] == encode(render_prompt(messages))
    content = completion.choices[0].logprobs and completion.choices[0].logprobs.content
    assert content is not None
    assert [entry.logprob for entry in content] == [logprob_of(t, i) for i, t in enumerate(encode("héllo"))]
    assert len(content[0].top_logprobs) == 2
    (served,) = upstream.served
    assert served.response_id == completion.id
    assert served.token_ids == encode("héllo")


async def test_without_return_token_ids_it_behaves_like_a_hosted_api() -> None:
    async with ScriptedUpstream(return_token_ids=False) as upstream, _client(upstream) as client:
        completion = await client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}], extra_body=VLLM
        )
    raw = completion.model_dump()
    assert "token_ids" not in raw["choices"][0]
    assert "prompt_token_ids" not in raw


async def test_streamed_chunks_add_up_to_the_reply() -> None:
    reply = Reply("Let me look.", tool_calls=[ToolCall("search", {"q": "otters"})])
    async with ScriptedUpstream(lambda _r: reply) as upstream, _client(upstream) as client:
        stream = await client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "otters?"}],
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
            extra_body=VLLM,
        )
        chunks = [chunk.model_dump() async for chunk in stream]
    (served,) = upstream.served
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ids = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
    logprobs = [
        e["logprob"]
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert text == "Let me look."
    assert ids == served.token_ids
    assert logprobs == served.logprobs
    assert chunks[0]["prompt_token_ids"] == served.prompt_token_ids
    assert [c["function"]["name"] for c in calls] == ["search"]
    assert chunks[-1]["usage"]["completion_tokens"] == len(served.token_ids)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


async def test_completions_endpoint_accepts_text_and_token_prompts() -> None:
    async with ScriptedUpstream(lambda r: r.prompt.upper()) as upstream, _client(upstream) as client:
        by_text = await client.completions.create(model="scripted", prompt="abc", logprobs=0, extra_body=VLLM)
        by_ids = await client.completions.create(model="scripted", prompt=[120, 121], extra_body=VLLM)
    assert by_text.choices[0].text == "ABC"
    choice = by_text.model_dump()["choices"][0]
    assert choice["prompt_token_ids"] == encode("abc")
    assert choice["token_ids"] == encode("ABC")
    assert choice["logprobs"]["token_logprobs"] == [logprob_of(t, i) for i, t in enumerate(encode("ABC"))]
    assert by_ids.choices[0].text == "XY"
    assert by_ids.model_dump()["choices"][0]["prompt_token_ids"] == [120, 121]


async def test_multi_agent_script_routes_by_system_prompt_and_turn() -> None:
    script = by_system_prompt(
        {
            "researcher": turns(Reply(tool_calls=[ToolCall("transfer_to_writer")]), "unreachable"),
            "writer": turns("draft", "final"),
        }
    )
    async with ScriptedUpstream(script) as upstream, _client(upstream) as client:

        async def ask(messages: Any) -> Any:
            return (await client.chat.completions.create(model="scripted", messages=messages)).choices[0]

        handoff = await ask(
            [{"role": "system", "content": "You are the researcher."}, {"role": "user", "content": "go"}]
        )
        first = await ask([{"role": "system", "content": "You are the writer."}, {"role": "user", "content": "go"}])
        second = await ask(
            [
                {"role": "system", "content": "You are the writer."},
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "draft"},
                {"role": "user", "content": "again"},
            ]
        )
        with pytest.raises(openai.BadRequestError, match="no script matches"):
            await ask([{"role": "system", "content": "You are the critic."}])
    assert handoff.finish_reason == "tool_calls"
    assert handoff.message.tool_calls is not None
    assert handoff.message.tool_calls[0].function.name == "transfer_to_writer"
    assert (first.message.content, second.message.content) == ("draft", "final")


def test_script_request_views() -> None:
    request = ScriptRequest(
        "chat",
        {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "content": "42"},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        },
    )
    assert (request.system, request.last_user, request.turn) == ("be brief", "q", 1)
    assert (request.tool_results, request.tool_names) == (["42"], ["f"])


def test_threaded_server_serves_sync_clients_and_script_errors() -> None:
    def script(request: ScriptRequest) -> str:
        raise ScriptError(503, f"overloaded for {request.last_user}")

    with ScriptedUpstream(script) as upstream:
        assert httpx.get(f"{upstream.base_url}/models").json()["data"][0]["id"] == "scripted"
        response = httpx.post(
            f"{upstream.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        bad = httpx.post(f"{upstream.base_url}/chat/completions", content=b"{not json")
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "overloaded for x"
    assert bad.status_code == 400
