"""The gateway speaks vLLM's OpenAI dialect to verl's replicas, as relight-verl hands them over.

verl reports each vLLM replica as ``host:port``; :func:`replica_base_url` makes it the gateway's
upstream. A scripted vLLM-style server stands in for the replica: the agent's plain OpenAI calls
must reach it asking for ``return_token_ids`` and logprobs, the LLM spans must hold exactly the
token ids and logprobs it sent, whole or streamed, and the verl batch made from the rollout's
transitions must carry those very tokens and logprobs.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
import torch

from relight import semconv
from relight.gateway import Gateway
from relight.records import AttemptStatus, RolloutRequest, Span, SpanKind
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder
from relight_verl.algorithm import replica_base_url
from relight_verl.batch import build_batch

MESSAGES: Any = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "2 + 3"}]


def test_replica_addresses_become_openai_base_urls() -> None:
    assert replica_base_url("10.0.0.5:8000") == "http://10.0.0.5:8000/v1"
    assert replica_base_url("[fe80::1]:8000") == "http://[fe80::1]:8000/v1"


async def test_calls_ask_a_verl_replica_for_token_ids_and_logprobs_and_record_them_exactly() -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="2 + 3")])
    claimed = await store.claim("runner")
    assert claimed is not None
    rollout, attempt = claimed
    async with ScriptedUpstream(model="coder") as replica:
        upstream = replica_base_url(replica.url.removeprefix("http://"))
        async with Gateway(store, [upstream], policy_version=4) as gateway:
            base_url = gateway.base_url_for(rollout.rollout_id, attempt.attempt_id)
            async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
                # What an agent sends: nothing vLLM-specific; the gateway adds it.
                whole = await client.chat.completions.create(model="coder", messages=MESSAGES)
                stream = await client.chat.completions.create(model="coder", messages=MESSAGES, stream=True)
                streamed = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
            await gateway.flush()

    assert whole.choices[0].message.content == streamed == "2 + 3"
    assert len(replica.requests) == 2
    for request in replica.requests:
        assert request["return_token_ids"] is True
        assert request["logprobs"] is True
    spans = [span for span in await store.query_spans(rollout.rollout_id) if span.kind is SpanKind.LLM]
    assert len(spans) == len(replica.served) == 2
    for span, served in zip(spans, replica.served, strict=True):
        attributes = span.attributes
        assert attributes[semconv.PROMPT_TOKEN_IDS] == served.prompt_token_ids
        assert attributes[semconv.RESPONSE_TOKEN_IDS] == served.token_ids
        assert attributes[semconv.RESPONSE_LOGPROBS] == pytest.approx(served.logprobs)
        assert attributes[semconv.POLICY_VERSION] == 4
        assert attributes[semconv.UPSTREAM] == upstream
        assert not attributes.get(semconv.RETOKENIZED)

    # The episode's reward, then the rollout's transitions, then the verl batch.
    end = max(span.end_time for span in spans)
    reward = Span(
        rollout_id=rollout.rollout_id,
        attempt_id=attempt.attempt_id,
        span_id="reward-1",
        trace_id="trace-1",
        name="reward",
        start_time=end,
        end_time=end,
        attributes={semconv.SPAN_KIND: SpanKind.REWARD.value, semconv.REWARD: 1.0},
    )
    await store.add_spans([reward])
    finished = await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
    transitions = await TransitionBuilder().from_store(store, [finished])
    batch, stats = build_batch(
        transitions, pad_token_id=0, max_prompt_length=256, max_response_length=64, multiple_of=4
    )
    assert batch is not None
    assert (stats.trained, stats.padded, stats.dropped) == (2, 2, 0)
    for row, served in enumerate(replica.served):
        prompt, response = len(served.prompt_token_ids), len(served.token_ids)
        assert batch.batch["prompts"][row, -prompt:].tolist() == served.prompt_token_ids
        assert batch.batch["responses"][row, :response].tolist() == served.token_ids
        expected_logprobs = torch.tensor(served.logprobs, dtype=torch.float32)
        assert torch.equal(batch.batch["old_log_probs"][row, :response], expected_logprobs)
        assert batch.batch["token_level_scores"][row].tolist() == [0.0] * (response - 1) + [1.0] + [0.0] * (
            batch.batch["responses"].shape[1] - response
        )
        assert batch.non_tensor_batch["uid"][row] == finished.group_id
