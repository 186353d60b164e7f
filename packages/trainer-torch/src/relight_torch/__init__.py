"""relight-torch: train an agent's policy with RL on the CPU or one GPU, inside relight.

A transformers model is served in-process by :class:`TorchEngine` (chat templates, tool calls,
dynamic batching, exact token ids and logprobs) and trained by :class:`GRPO` (or REINFORCE++)
or :class:`SFT` over relight's transitions; each implements :class:`relight.Algorithm`::

    from relight_torch import GRPO, TorchEngine

    engine = TorchEngine.from_pretrained("path/to/model")
    relight.Trainer(algorithm=GRPO(engine, lr=2e-4)).fit(agent, train_tasks, val_tasks)

For a real model where vLLM is installed, :mod:`relight_torch.vllm` serves the policy with vLLM instead
(``VLLMGRPO(VLLMPolicy(folder))``); ``TorchEngine`` serves the tiny model, tests and machines without vLLM.
``python -m relight_torch.demo`` trains a tool-using calculator agent from scratch in minutes.

The package is grouped by concept: :mod:`relight_torch.engine` (serving), :mod:`relight_torch.learner`
(an optimizer step), :mod:`relight_torch.algorithms` (GRPO, SFT), :mod:`relight_torch.models` (SmolLM2, the
tiny model), :mod:`relight_torch.vllm` (the policy served by vLLM) and :mod:`relight_torch.recipes`. The
names below are imported on first use, so that importing the package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from relight_torch import _moved

if TYPE_CHECKING:
    from relight_torch.algorithms.advantages import grpo_advantages, reinforce_pp_advantages
    from relight_torch.algorithms.grpo import GRPO
    from relight_torch.algorithms.sft import SFT, conversation_samples, read_conversations, transition_samples
    from relight_torch.engine.torch_engine import TorchEngine
    from relight_torch.models.smollm2 import smollm2
    from relight_torch.models.tiny import tiny_engine, tiny_model, tiny_tokenizer

_HOMES = {
    "grpo_advantages": "algorithms.advantages",
    "reinforce_pp_advantages": "algorithms.advantages",
    "TorchEngine": "engine.torch_engine",
    "GRPO": "algorithms.grpo",
    "SFT": "algorithms.sft",
    "smollm2": "models.smollm2",
    "conversation_samples": "algorithms.sft",
    "read_conversations": "algorithms.sft",
    "transition_samples": "algorithms.sft",
    "tiny_engine": "models.tiny",
    "tiny_model": "models.tiny",
    "tiny_tokenizer": "models.tiny",
}

__all__ = [
    "GRPO",
    "SFT",
    "TorchEngine",
    "conversation_samples",
    "grpo_advantages",
    "read_conversations",
    "reinforce_pp_advantages",
    "smollm2",
    "tiny_engine",
    "tiny_model",
    "tiny_tokenizer",
    "transition_samples",
]

_moved.keep_importable()


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'relight_torch' has no attribute {name!r}")
    return getattr(importlib.import_module(f"relight_torch.{home}"), name)
