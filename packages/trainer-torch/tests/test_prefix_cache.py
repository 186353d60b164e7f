"""The prefix cache: a prompt that starts like a finished sequence reuses its keys and values, exactly."""

import torch

from relight.engine import GenerationRequest, SamplingParams
from relight_torch.engine.prefix_cache import PrefixCache
from relight_torch.engine.running_batch import RunningBatch
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.packing import pack, response_logprobs


def prompt(engine: TorchEngine, *turns: str) -> list[int]:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": turn} for i, turn in enumerate(turns)]
    return engine.prompt_ids(GenerationRequest(model=engine.name, messages=messages))


def fresh_logprobs(engine: TorchEngine, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(engine.model, pack([prompt_ids], [response_ids], pad_id=engine.pad_id))[0]


def test_an_agents_next_call_computes_only_its_new_tokens_and_its_logprobs_stay_exact(engine: TorchEngine) -> None:
    first_ids = prompt(engine, "What is 12 * 7?")
    first = engine.submit(first_ids, SamplingParams(max_tokens=6, seed=1)).result(timeout=120)
    assert first.finish == "length"
    # The next call: the same conversation, the answer, then a new turn (an agent's tool round trip).
    follow = prompt(engine, "What is 12 * 7?", engine.tokenizer.decode(first.response_ids), "And times 3?")
    second = engine.submit(follow, SamplingParams(max_tokens=8, seed=2)).result(timeout=120)
    assert engine.prefixes.hits == 1
    shared = next(i for i, (a, b) in enumerate(zip(first_ids + first.response_ids, follow, strict=False)) if a != b)
    assert engine.prefixes.reused_tokens == min(shared, len(first_ids) + len(first.response_ids) - 1)
    assert engine.prefixes.reused_tokens > len(first_ids) // 2
    fresh = fresh_logprobs(engine, follow, second.response_ids)
    assert torch.allclose(fresh, torch.tensor(second.logprobs), atol=1e-4, rtol=0)

    with engine.updating_weights():  # new weights: what the old ones computed is never reused
        pass
    engine.submit(follow, SamplingParams(max_tokens=2)).result(timeout=120)
    assert engine.prefixes.hits == 1
    engine.submit(follow, SamplingParams(max_tokens=2)).result(timeout=120)
    assert engine.prefixes.hits == 2
    with torch.no_grad():  # weights changed behind the engine's back (a checkpoint loaded): no reuse either
        engine.model.load_state_dict(engine.model.state_dict())
    engine.submit(follow, SamplingParams(max_tokens=2)).result(timeout=120)
    assert engine.prefixes.hits == 2


def test_rows_with_and_without_a_kept_start_prefill_together_exactly(engine: TorchEngine) -> None:
    prefixes = PrefixCache(4096)
    kept = prompt(engine, "What is " + "9" * 30 + "?")
    longer = kept + prompt(engine, "and then 4?")[1:]
    unrelated = list(engine.tokenizer.encode("Hi, how are you?"))
    assert unrelated[0] != kept[0]
    with torch.inference_mode():
        first = RunningBatch(engine.model, engine.pad_id, prefixes)
        first.prefill([kept])
        first.remember(0, kept)
        batch = RunningBatch(engine.model, engine.pad_id, prefixes)
        logits = batch.prefill([unrelated, longer])  # the second reuses `kept`, the first has nothing to reuse
        assert (prefixes.hits, prefixes.reused_tokens) == (1, len(kept))
        for row, ids in enumerate([unrelated, longer]):
            alone = engine.model(input_ids=torch.tensor([ids])).logits[0, -1]
            assert torch.allclose(logits[row], alone, atol=1e-4, rtol=0)
        # A decoding step after it: the kept start's keys and values are part of the row's cache.
        step = batch.step(torch.tensor([5, 6]))
        for row, ids in enumerate([[*unrelated, 5], [*longer, 6]]):
            alone = engine.model(input_ids=torch.tensor([ids])).logits[0, -1]
            assert torch.allclose(step[row], alone, atol=1e-4, rtol=0)


def test_a_sequence_that_extends_a_kept_one_replaces_it_and_the_budget_holds() -> None:
    cache = PrefixCache(10)
    cache.use(0)

    def kv(n: int) -> list[torch.Tensor]:
        return [torch.arange(n, dtype=torch.float32).reshape(1, n, 1).expand(1, n, 2)]

    cache.add([1, 2, 3], kv(3), kv(3))
    cache.add([1, 2, 3, 4, 5], kv(5), kv(5))
    assert len(cache) == 1
    found = cache.longest([1, 2, 3, 4, 9, 9])
    assert found is not None
    assert found.length == 4
    assert found.keys[0].shape == (1, 4, 2)
    assert cache.longest([1, 2]) is not None  # leaves the prompt its last token: 1 reused
    assert cache.longest([7, 1, 2]) is None
    cache.add([8] * 6, kv(6), kv(6))  # 5 + 6 > 10: the least recently used goes
    assert len(cache) == 1
    assert cache.longest([1, 2, 3]) is None
    cache.use(1)
    assert len(cache) == 0
