"""A call that spans a weight update, through the gateway to relight-torch's engine: the documented rule.

The update lands between two generation steps; the call is resumed on the new weights (prefilled
again); each token's logprob is the one of the policy that sampled it; the span's
``relight.policy_version`` is the oldest version and ``relight.policy_version.segments`` says which
version sampled which tokens; the transition carries both.
"""

import copy
import threading
from typing import Any

import openai
import pytest
import torch

from relight import semconv
from relight.gateway import Gateway
from relight.records import RolloutRequest
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder

relight_torch = pytest.importorskip("relight_torch")
from relight_torch.engine.torch_engine import TorchEngine  # noqa: E402
from relight_torch.learner.packing import pack, response_logprobs  # noqa: E402
from relight_torch.models.tiny import tiny_engine  # noqa: E402

MESSAGES: Any = [{"role": "user", "content": "What is 12 * 7?"}]
SWAP_AFTER = 2
"""Generation steps (forward passes) the call takes under version 0 before the update lands."""


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return changed


def _scored(model: torch.nn.Module, prompt: list[int], response: list[int], pad_id: int) -> list[float]:
    with torch.no_grad():
        return response_logprobs(model, pack([prompt], [response], pad_id=pad_id))[0].tolist()


class _SwapMidCall:
    """Starts ``engine.load_weights(new)`` inside the engine's ``SWAP_AFTER``-th forward pass and returns once
    that update is waiting, so it lands exactly between that step and the next."""

    def __init__(self, engine: TorchEngine, new: torch.nn.Module) -> None:
        self.engine, self.new = engine, new
        self.forwards = 0
        self.swapper = threading.Thread(target=engine.load_weights, args=(new,))

    def __call__(self, *_: Any) -> None:
        self.forwards += 1
        if self.forwards == SWAP_AFTER:
            self.swapper.start()
            gate = self.engine._weights  # pyright: ignore[reportPrivateUsage]
            with gate.condition:
                assert gate.condition.wait_for(lambda: gate.updates_waiting > 0, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_spanning_an_update_is_resumed_on_the_new_weights_and_its_span_says_which_tokens_each_sampled(
    stream: bool,
) -> None:
    store = InMemoryStore()
    (rollout,) = await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    attempt = claimed[1]
    with tiny_engine(seed=0) as engine:
        old, new = copy.deepcopy(engine.model), _perturbed(engine.model)
        swap = _SwapMidCall(engine, new)
        hook = engine.model.register_forward_hook(swap)
        try:
            async with (
                Gateway(store, [engine]) as gateway,
                openai.AsyncOpenAI(
                    base_url=gateway.base_url_for(rollout.rollout_id, attempt.attempt_id), api_key="x"
                ) as client,
            ):
                answer: Any = await client.chat.completions.create(
                    model="relight-tiny", messages=MESSAGES, max_tokens=16, seed=3, stream=stream
                )
                if stream:
                    _ = [chunk async for chunk in answer]
                await gateway.flush()
        finally:
            hook.remove()
            swap.swapper.join()
        assert engine.policy_version == 1
        pad_id = engine.pad_id
    (span,) = await store.query_spans(rollout.rollout_id)
    assert span.attributes[semconv.POLICY_VERSION] == 0
    assert span.attributes[semconv.POLICY_VERSION_SEGMENTS] == [[0, 0], [SWAP_AFTER, 1]]
    prompt = span.attributes[semconv.PROMPT_TOKEN_IDS]
    response = span.attributes[semconv.RESPONSE_TOKEN_IDS]
    logprobs = span.attributes[semconv.RESPONSE_LOGPROBS]
    assert isinstance(prompt, list)
    assert isinstance(response, list)
    assert isinstance(logprobs, list)
    assert len(response) > SWAP_AFTER
    prompt_ids, response_ids = [int(str(t)) for t in prompt], [int(str(t)) for t in response]
    expected = (
        _scored(old, prompt_ids, response_ids, pad_id)[:SWAP_AFTER]
        + _scored(new, prompt_ids, response_ids, pad_id)[SWAP_AFTER:]
    )
    assert torch.allclose(torch.tensor([float(str(v)) for v in logprobs]), torch.tensor(expected), atol=1e-4)
    (transition,) = TransitionBuilder().from_spans(rollout, attempt.attempt_id, [span])
    assert transition.policy_version == 0
    assert transition.metadata["policy_version_segments"] == [[0, 0], [SWAP_AFTER, 1]]
