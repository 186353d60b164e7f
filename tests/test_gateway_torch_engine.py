"""The gateway in front of relight-torch's in-process engine: a real (tiny) model behind the openai client."""

from typing import Any

import openai
import pytest

from relight import semconv
from relight.engine import SamplingParams
from relight.gateway import Gateway, HuggingFaceRetokenizer
from relight.records import RolloutRequest
from relight.stores.memory import InMemoryStore

relight_torch = pytest.importorskip("relight_torch")
from relight_torch.engine.torch_engine import TorchEngine  # noqa: E402
from relight_torch.models.tiny import tiny_engine, tiny_model, tiny_tokenizer  # noqa: E402

MESSAGES: Any = [{"role": "user", "content": "Add 2 and 3."}]


@pytest.mark.parametrize("stream", [False, True])
async def test_engine_calls_are_recorded_with_the_sampled_token_ids(stream: bool) -> None:
    tokenizer = tiny_tokenizer()
    engine = TorchEngine(tiny_model(tokenizer), tokenizer, seed=1)
    store = InMemoryStore()
    (rollout,) = await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    attempt = claimed[1]
    try:
        async with (
            Gateway(store, [engine], policy_version=99) as gateway,
            openai.AsyncOpenAI(
                base_url=gateway.base_url_for(rollout.rollout_id, attempt.attempt_id), api_key="x"
            ) as client,
        ):
            if stream:
                chunks = await client.chat.completions.create(
                    model="relight-tiny",
                    messages=MESSAGES,
                    max_tokens=12,
                    stream=True,
                )
                text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
            else:
                completion = await client.chat.completions.create(
                    model="relight-tiny", messages=MESSAGES, max_tokens=12
                )
                text = completion.choices[0].message.content or ""
            await gateway.flush()
    finally:
        engine.close()
    (span,) = await store.query_spans(rollout.rollout_id)
    ids = span.attributes[semconv.RESPONSE_TOKEN_IDS]
    assert isinstance(ids, list)
    assert 0 < len(ids) <= 12
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    logprobs = span.attributes[semconv.RESPONSE_LOGPROBS]
    assert isinstance(logprobs, list)
    assert len(logprobs) == len(ids)
    assert all(isinstance(lp, float) and lp <= 0 for lp in logprobs)
    prompt = HuggingFaceRetokenizer(tokenizer).prompt_ids(MESSAGES, None)
    assert span.attributes[semconv.PROMPT_TOKEN_IDS] == prompt
    assert span.attributes[semconv.POLICY_VERSION] == 0  # the engine's own version wins over the gateway's
    assert span.attributes[semconv.UPSTREAM] == "engine"


async def test_past_the_context_a_budget_is_capped_or_refused_and_a_prompt_is_context_length_exceeded() -> None:
    store = InMemoryStore()
    (rollout,) = await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    with tiny_engine(max_positions=64) as engine:
        async with (
            Gateway(store, [engine]) as gateway,
            openai.AsyncOpenAI(
                base_url=gateway.base_url_for(rollout.rollout_id, claimed[1].attempt_id), api_key="x", max_retries=0
            ) as client,
        ):
            capped = await client.chat.completions.create(model="relight-tiny", messages=MESSAGES, max_tokens=60)
            with pytest.raises(openai.BadRequestError) as beyond:  # more than the whole context: a mistake, refused
                await client.chat.completions.create(model="relight-tiny", messages=MESSAGES, max_tokens=10**12)
            with pytest.raises(openai.BadRequestError) as raised:
                await client.chat.completions.create(
                    model="relight-tiny", messages=[{"role": "user", "content": "word " * 80}], max_tokens=5
                )
            await gateway.flush()
            spans = await store.query_spans(rollout.rollout_id, claimed[1].attempt_id)
    assert capped.usage is not None
    assert capped.usage.prompt_tokens + capped.usage.completion_tokens <= 64
    assert spans[0].attributes[semconv.MAX_TOKENS_CAPPED] == 64 - capped.usage.prompt_tokens
    assert (beyond.value.param, beyond.value.code) == ("max_tokens", "invalid_value")
    assert "whole context of 64 tokens" in beyond.value.message
    assert raised.value.code == "context_length_exceeded"
    assert "maximum context length is 64 tokens" in raised.value.message


def test_the_tiny_model_holds_a_realistic_agent_prompt() -> None:
    with tiny_engine() as engine:
        assert engine.context_length == 4096
        assert engine.submit([5] * 1500, SamplingParams(max_tokens=1)).result() is not None
