"""What the engine does with a request's options: honoured, or refused with a 4xx naming them (never a 502)."""

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from relight.gateway import EngineUpstream, UpstreamError
from relight_torch.engine.chat import render
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}
ASK = [{"role": "user", "content": "add"}]


@pytest.mark.parametrize(
    ("options", "status", "param"),
    [
        ({"model": "no-such-model"}, 404, "model"),
        ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "sub"}}}, 400, "tool_choice"),
        ({"tool_choice": "required"}, 400, "tool_choice"),
        ({"response_format": {"type": "yaml"}}, 400, "response_format"),
        ({"response_format": {"type": "json_schema"}}, 400, "response_format"),
        ({"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
        ({"max_tokens": 10**9}, 400, "max_tokens"),
    ],
)
async def test_requests_the_engine_cannot_serve_are_the_clients_fault(
    engine: TorchEngine, options: dict, status: int, param: str | None
) -> None:
    body = {"model": engine.name, "messages": ASK, "max_tokens": 4, **options}
    with pytest.raises(UpstreamError) as refused:
        await EngineUpstream(engine, name="tiny").complete("chat", body)
    assert refused.value.status_code == status
    assert refused.value.param == param


async def test_a_template_that_refuses_the_messages_is_a_400_naming_them(engine: TorchEngine) -> None:
    engine.tokenizer.chat_template = "{{ raise_exception('roles must alternate user/assistant') }}"
    with pytest.raises(UpstreamError, match="roles must alternate") as refused:
        await EngineUpstream(engine).complete("chat", {"model": engine.name, "messages": ASK})
    assert (refused.value.status_code, refused.value.param) == (400, "messages")


async def test_a_forced_call_is_a_call_of_the_named_tool_with_schema_arguments(engine: TorchEngine) -> None:
    body = {
        "model": engine.name,
        "messages": ASK,
        "tools": [ADD],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "max_tokens": 40,
        "logprobs": True,
        "top_logprobs": 2,
    }
    answer = await EngineUpstream(engine).complete("chat", body)
    (choice,) = answer["choices"]
    (call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "add"
    assert isinstance(json.loads(call["function"]["arguments"])["a"], int)
    assert choice["token_ids"][-1] in engine.decoding.stop_ids  # the turn ended right after the call
    content = choice["logprobs"]["content"]
    assert len(content) == len(choice["token_ids"])
    assert all(entry["bytes"] == list(entry["token"].encode()) for entry in content)
    assert all(len(entry["top_logprobs"]) == 2 for entry in content)
    assert "".join(entry["token"] for entry in content).startswith("<tool_call>")


async def test_force_first_tool_call_forces_auto_until_a_tool_has_answered(engine: TorchEngine) -> None:
    """``force_first_tool_call``: ``auto`` is decoded as ``required`` while no tool result is in the messages."""
    upstream = EngineUpstream(engine)
    body = {"model": engine.name, "tools": [ADD], "tool_choice": "auto", "max_tokens": 40}
    engine.force_first_tool_call = True
    first = (await upstream.complete("chat", {**body, "messages": ASK}))["choices"][0]
    assert first["finish_reason"] == "tool_calls"
    (call,) = first["message"]["tool_calls"]
    assert call["function"]["name"] == "add"
    tool_turn = {"role": "assistant", "content": None, "tool_calls": [call]}
    answered = {**body, "messages": [*ASK, tool_turn, {"role": "tool", "tool_call_id": call["id"], "content": "2"}]}
    after = (await upstream.complete("chat", {**answered, "seed": 3}))["choices"][0]
    engine.force_first_tool_call = False
    unforced = (await upstream.complete("chat", {**answered, "seed": 3}))["choices"][0]
    assert after["token_ids"] == unforced["token_ids"]  # once the tool has answered, decoding is free again
    assert (await upstream.complete("chat", {**body, "messages": ASK}))["choices"][0]["finish_reason"] != "tool_calls"


async def test_tiny_engine_takes_force_first_tool_call_as_the_server_does() -> None:
    """``tiny_engine(force_first_tool_call=True)``: the untrained tiny model calls the tool first."""
    with tiny_engine(seed=0, force_first_tool_call=True) as forced:
        body = {"model": forced.name, "tools": [ADD], "max_tokens": 40, "messages": ASK}
        first = (await EngineUpstream(forced).complete("chat", body))["choices"][0]
        assert first["finish_reason"] == "tool_calls"


def test_smollm2_template_renders_tool_turns_with_null_content(smollm2_path: Path) -> None:
    """SmolLM2's ChatML template concatenates content and knows no tools: null content and calls must still render."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "content": "2"}]
    text = tokenizer.decode(render(tokenizer, messages, tools=[ADD], add_generation_prompt=True))
    assert '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call><|im_end|>' in text
    assert text.startswith("<|im_start|>system\nYou may call one or more functions")
    assert json.dumps(ADD) in text
    assert text.endswith("<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n")
