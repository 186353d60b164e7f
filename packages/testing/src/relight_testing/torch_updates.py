"""Helpers for tests of relight-torch's updates: a hand-made group of answers, and the gradients an update left.

Needs relight-torch (``pip install relight-testing[torch]``). :func:`answers` makes a GRPO group whose
logprobs are those the engine's policy gives it now; :func:`final_gradients` keeps each parameter's
gradient, which the learner drops once the parameter has moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from relight.engine import GenerationRequest
from relight.records import Transition
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner, Sample

__all__ = ["QUESTION", "answers", "final_gradients"]

QUESTION = [{"role": "user", "content": "What is 12 * 7?"}]


@contextmanager
def final_gradients(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Each trainable parameter's gradient as the block's last backward pass left it (clipped, if the learner
    clipped it).

    The learner drops every gradient once its parameter has moved, so tests that compare gradients take
    them here: the list is filled, in ``model.parameters()`` order, when the block ends; parameters that
    do not require gradients (frozen layers) have no place in it.
    """
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    seen: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Any:
        return lambda parameter: seen.__setitem__(index, parameter.grad)

    handles = [p.register_post_accumulate_grad_hook(keep(i)) for i, p in enumerate(parameters)]
    gradients: list[torch.Tensor] = []
    try:
        yield gradients
    finally:
        for handle in handles:
            handle.remove()
    gradients.extend(seen[i] for i in range(len(parameters)) if i in seen)


def answers(engine: TorchEngine, texts: list[str], rewards: list[float]) -> list[Transition]:
    """One group: :data:`QUESTION` answered with each text, scored by hand, logprobs as the engine would record
    them now (under policy version 0)."""
    prompt = engine.prompt_ids(GenerationRequest(model="m", messages=QUESTION))
    responses = [[*engine.tokenizer.encode(text), engine.tokenizer.eos_token_id] for text in texts]
    logprobs = Learner(engine.model, pad_id=engine.pad_id).logprobs([Sample(prompt, r) for r in responses])
    return [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id="task",
            step=0,
            prompt_token_ids=prompt,
            response_token_ids=response,
            response_logprobs=logprobs[i],
            reward=reward,
            policy_version=0,
        )
        for i, (response, reward) in enumerate(zip(responses, rewards, strict=True))
    ]
