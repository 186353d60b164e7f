"""The gateway with its defaults in front of a real third-party server: `transformers serve` with SmolLM2."""

import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from rich.console import Console

from relight import semconv
from relight.agent import LLM, rollout
from relight.gateway import Gateway
from relight.records import RolloutRequest
from relight.stores.memory import InMemoryStore
from relight.training.trainer import Trainer
from relight_testing.faults import free_port
from relight_testing.models import server_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transformers_serve(smollm2_path: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(smollm2_path)]
    with server_process([*command, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]):
        yield f"http://127.0.0.1:{port}/v1"


async def test_its_calls_are_retokenized_with_the_end_of_turn_token(
    transformers_serve: str, smollm2_path: Path
) -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    rollout, attempt = claimed
    model = str(smollm2_path)
    async with Gateway(store, [transformers_serve]) as gateway:
        base_url = gateway.base_url_for(rollout.rollout_id, attempt.attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x") as client:
            reply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "What is the capital of France?"}], temperature=0
            )
        await gateway.flush()
        (upstream,) = gateway.pool.upstreams
    assert reply.choices[0].finish_reason == "stop"
    assert "return_token_ids" in upstream.refused  # type: ignore[attr-defined]
    assert (gateway.stats.retokenized, gateway.stats.untrainable) == (1, 0)
    (span,) = await store.query_spans(rollout.rollout_id)
    ids = span.attributes[semconv.RESPONSE_TOKEN_IDS]
    assert span.attributes[semconv.RETOKENIZED] is True
    assert semconv.RESPONSE_LOGPROBS not in span.attributes
    assert ids[-1] == 2  # type: ignore[index]  # <|im_end|>, which the model sampled to stop
    assert reply.usage is not None
    assert span.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == len(ids) == reply.usage.completion_tokens  # type: ignore[arg-type]


def test_dev_mode_shows_its_calls_as_retokenized(transformers_serve: str, smollm2_path: Path) -> None:
    @rollout
    def ask(task: str, llm: LLM) -> float:
        with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            messages: list[Any] = [{"role": "user", "content": task}]
            client.chat.completions.create(model=llm.model, messages=messages, max_tokens=8, temperature=0)
        return 1.0

    shown = io.StringIO()
    trainer = Trainer(console=Console(file=shown, width=200))
    (result,) = trainer.dev(
        ask, ["What is the capital of France?"], base_url=transformers_serve, model=str(smollm2_path)
    )
    assert (result.calls, result.trainable_calls, result.retokenized_calls, result.untrainable_calls) == (1, 0, 1, 0)
    printed = shown.getvalue()
    assert result.rollout.rollout_id in printed
    counted = [line for line in printed.splitlines() if "retokenized" in line]  # the rollout's row and the total
    assert counted, printed
    assert all("1 retokenized" in line and "trainable" not in line.replace("retokenized", "") for line in counted)
