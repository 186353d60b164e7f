"""Continuous batching: a request that arrives while a batch runs joins it at the next step."""

from concurrent.futures import Future
from typing import Any

import torch

from relight.engine import GenerationRequest, SamplingParams
from relight_torch.engine.torch_engine import Sampled, TorchEngine
from relight_torch.learner.packing import pack, response_logprobs


def prompt(engine: TorchEngine, content: str) -> list[int]:
    return engine.prompt_ids(GenerationRequest(model=engine.name, messages=[{"role": "user", "content": content}]))


def test_a_request_arriving_mid_batch_joins_it_and_is_answered_before_the_batch_ends(engine: TorchEngine) -> None:
    long = engine.submit(prompt(engine, "Hello"), SamplingParams(temperature=0.0, max_tokens=40))
    # A shorter prompt than the running rows (padded on the left to join) and a longer one (the running rows are).
    prompts = [prompt(engine, "Hi"), prompt(engine, "What is " + "9" * 60 + "?")]
    joiners: list[Future[Sampled]] = []
    long_done_when_answered: list[bool] = []
    forwards = 0

    def submit_during_the_batch(*_: Any) -> None:  # runs on the engine's worker, inside a generation step
        nonlocal forwards
        forwards += 1
        if forwards == 5:
            for seed, ids in enumerate(prompts):
                future = engine.submit(ids, SamplingParams(max_tokens=3, seed=seed))
                future.add_done_callback(lambda _: long_done_when_answered.append(long.done()))
                joiners.append(future)

    hook = engine.model.register_forward_hook(submit_during_the_batch)
    try:
        long.result(timeout=120)  # the joiners were submitted by then
        results = [future.result(timeout=120) for future in [long, *joiners]]
    finally:
        hook.remove()
    assert results[0].finish == "length"
    assert len(results[0].response_ids) == 40  # the batch ran on after them
    assert long_done_when_answered == [False, False]
    assert (engine.batches, engine.joined) == (1, 2)
    # Exact all the same: every row's logprobs are those of a fresh forward pass over its own tokens.
    for ids, result in zip([prompt(engine, "Hello"), *prompts], results, strict=True):
        batch = pack([ids], [result.response_ids], pad_id=engine.pad_id)
        with torch.no_grad():
            fresh = response_logprobs(engine.model, batch)[0]
        assert torch.allclose(fresh, torch.tensor(result.logprobs), atol=1e-4, rtol=0)
