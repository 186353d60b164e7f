"""Scoring a batch whose prompts share a start (an agent's system prompt and tools) computes that start once.

The numbers must be those of scoring each row whole: the same logprobs, and the same gradients
(they flow back through the repeated keys and values to the one computation of the start).
"""

import torch

from relight_torch.learner.learner import Sample
from relight_torch.learner.packing import pack, response_logprobs, shared_prefix
from relight_torch.models.tiny import tiny_engine

START = list(range(5, 45))
SAMPLES = [
    Sample([*START, 50, 51, 52], [60, 61, 62, 63]),
    Sample([*START, 53], [64, 65]),
    Sample([*START, 54, 55], [66, 67, 68, 69, 70, 71]),
]


def _score(model: torch.nn.Module, share: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    batch = pack([s.prompt_ids for s in SAMPLES], [s.response_ids for s in SAMPLES], pad_id=0, share=share)
    assert batch.shared == (len(START) if share else 0)
    logprobs = response_logprobs(model, batch)  # type: ignore[arg-type]
    (logprobs * batch.response_mask).sum().backward()
    return logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_shared_start_gives_the_logprobs_and_gradients_of_whole_rows() -> None:
    with tiny_engine(seed=0, num_layers=2) as engine:
        whole, whole_grads = _score(engine.model, share=False)
        shared, shared_grads = _score(engine.model, share=True)
    torch.testing.assert_close(shared, whole, atol=1e-5, rtol=1e-5)
    assert whole_grads
    assert whole_grads.keys() == shared_grads.keys()
    for name, grad in whole_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_too_short_a_shared_start_is_not_split_off() -> None:
    assert shared_prefix([[1] * 10 + [2], [1] * 10 + [3]]) == 0
    assert shared_prefix([[1] * 20 + [2], [1] * 20 + [3]]) == 20
    assert shared_prefix([[7] * 30]) == 0
