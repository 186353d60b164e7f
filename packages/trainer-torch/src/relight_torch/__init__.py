"""relight-torch: train an agent's policy with RL on the CPU or one GPU, inside relight.

A transformers model is served in-process by :class:`TorchEngine` (chat templates, tool calls,
dynamic batching, exact token ids and logprobs) and trained by :class:`GRPO` (or REINFORCE++)
or :class:`SFT` over relight's transitions; each implements :class:`relight.Algorithm`::

    from relight_torch import GRPO, TorchEngine

    engine = TorchEngine.from_pretrained("path/to/model")
    relight.Trainer(algorithm=GRPO(engine, lr=2e-4)).fit(agent, train_tasks, val_tasks)

``python -m relight_torch.demo`` trains a tool-using calculator agent from scratch in minutes.

Names are imported on first use, so that importing it does
not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relight_torch.advantages import grpo_advantages, reinforce_pp_advantages
    from relight_torch.engine import TorchEngine
    from relight_torch.grpo import GRPO
    from relight_torch.models import smollm2
    from relight_torch.sft import SFT, conversation_samples, read_conversations, transition_samples
    from relight_torch.tiny import tiny_engine, tiny_model, tiny_tokenizer

_HOMES = {
    "grpo_advantages": "advantages",
    "reinforce_pp_advantages": "advantages",
    "TorchEngine": "engine",
    "GRPO": "grpo",
    "SFT": "sft",
    "smollm2": "models",
    "conversation_samples": "sft",
    "read_conversations": "sft",
    "transition_samples": "sft",
    "tiny_engine": "tiny",
    "tiny_model": "tiny",
    "tiny_tokenizer": "tiny",
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'relight_torch' has no attribute {name!r}")
    return getattr(importlib.import_module(f"relight_torch.{home}"), name)
