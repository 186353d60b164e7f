import asyncio
from typing import Any

import pytest
import torch

from relight.engine import GenerationRequest, SamplingParams
from relight_torch.demo.calculator import TOOLS
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.packing import pack, response_logprobs


def chat(content: str, **sampling: Any) -> GenerationRequest:
    return GenerationRequest(
        model="relight-tiny",
        messages=[{"role": "user", "content": content}],
        tools=TOOLS,
        sampling=SamplingParams(**{"max_tokens": 24, **sampling}),
    )


async def test_logprobs_equal_a_fresh_forward_pass_over_the_same_tokens(engine: TorchEngine) -> None:
    # Prompts of different lengths in one batch: left padding, the KV cache and dropping rows that finish
    # early must all leave each row's numbers as they would be alone.
    requests = [chat("What is " + "9" * n + "?", seed=n, max_tokens=8 + 3 * n) for n in range(1, 13)]
    generations = await asyncio.gather(*(engine.generate(r) for r in requests))
    for generation in generations:
        batch = pack([generation.prompt_token_ids], [generation.response_token_ids], pad_id=engine.pad_id)
        with torch.no_grad():
            fresh = response_logprobs(engine.model, batch)[0]
        assert torch.allclose(fresh, torch.tensor(generation.response_logprobs), atol=1e-4, rtol=0)
    assert len({len(g.response_token_ids) for g in generations}) > 1  # rows did finish at different steps


async def test_concurrent_requests_share_batches_and_never_straddle_a_weight_update(engine: TorchEngine) -> None:
    with engine.updating_weights():
        pending = [
            engine.submit(engine.prompt_ids(chat(f"What is {n} + {n}?")), SamplingParams(max_tokens=4))
            for n in range(16)
        ]
        assert not any(future.done() for future in pending)  # held while the weights change
    results = [await asyncio.wrap_future(future) for future in pending]
    assert engine.batches <= 2  # the worker took what it found waiting, not one request at a time
    assert {result.policy_version for result in results} == {1}


async def test_prompt_is_the_chat_template_with_the_tools(engine: TorchEngine) -> None:
    generation = await engine.generate(chat("What is 12 * 7?", max_tokens=2))
    prompt = engine.tokenizer.decode(generation.prompt_token_ids)
    assert prompt == (
        "<|tools|>calculator(expression): Evaluate an arithmetic expression.\n<|end|>"
        "<|user|>What is 12 * 7?<|end|><|assistant|>"
    )


async def test_greedy_and_seeded_sampling_repeat_themselves(engine: TorchEngine) -> None:
    greedy = [await engine.generate(chat("What is 1 + 2?", temperature=0.0)) for _ in range(2)]
    assert greedy[0].response_token_ids == greedy[1].response_token_ids
    seeded = [await engine.generate(chat("What is 1 + 2?", seed=7)) for _ in range(2)]
    assert seeded[0].response_token_ids == seeded[1].response_token_ids
    other = await engine.generate(chat("What is 1 + 2?", seed=8))
    assert other.response_token_ids != seeded[0].response_token_ids


async def test_max_tokens_ends_with_length_and_stop_strings_cut_the_text(engine: TorchEngine) -> None:
    long = await engine.generate(chat("Hello", temperature=0.0, max_tokens=5))
    assert long.finish_reason == "length"
    assert len(long.response_token_ids) == 5
    stop = long.text.strip()[-1]  # a character the greedy reply is known to contain
    stopped = await engine.generate(chat("Hello", temperature=0.0, max_tokens=5, stop=(stop,)))
    assert stopped.text == long.text[: long.text.index(stop)]
    assert stopped.finish_reason == "stop"
    assert stopped.response_token_ids == long.response_token_ids[: len(stopped.response_token_ids)]


def test_top_p_keeps_only_the_most_likely_tokens(engine: TorchEngine) -> None:
    ids = engine.prompt_ids(chat("What is 5 - 3?"))
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([ids])).logits[0, -1]
    best = int(logits.argmax())
    futures = [engine.submit(ids, SamplingParams(top_p=1e-6, max_tokens=1, seed=s)) for s in range(8)]
    assert {f.result().response_ids[0] for f in futures} == {best}


@pytest.mark.parametrize(
    ("sampling", "field"),
    [({"max_tokens": 10_000}, "max_tokens"), ({"max_tokens": 0}, "max_tokens"), ({"top_p": 0.0}, "top_p")],
)
async def test_bad_sampling_values_are_refused_naming_the_field(
    engine: TorchEngine, sampling: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        await engine.generate(chat("Hi", **sampling))
