"""The gateway with its defaults in front of a real third-party server: `transformers serve` with SmolLM2."""

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from relight import semconv
from relight.gateway import Gateway
from relight.models import RolloutRequest
from relight.stores.memory import InMemoryStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transformers_serve(smollm2_path: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(smollm2_path)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:  # its own readiness line, not a sleep
            if "Uvicorn running on" in line:
                break
        else:
            pytest.fail(f"transformers serve exited with {server.wait()} before serving")
        drain = threading.Thread(target=server.stderr.read, daemon=True)  # its log never fills the pipe
        drain.start()
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()


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
