"""Build an engine or an algorithm from a model name: what ``python -m relight_torch.server`` and scripts use.

Factories import torch and transformers only when called, so importing this module stays cheap.
Each takes ``model``: ``"tiny"`` (the built-in tiny model), a local Hugging Face directory, or a
:class:`~relight_torch.engine.TorchEngine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relight_torch.engine import TorchEngine
    from relight_torch.grpo import GRPO
    from relight_torch.sft import SFT


def engine(model: str | Path | TorchEngine = "tiny", **options: Any) -> TorchEngine:
    """The engine for ``model`` (see the module docstring); ``options`` go to its constructor."""
    from relight_torch.engine import TorchEngine
    from relight_torch.tiny import tiny_engine

    if isinstance(model, TorchEngine):
        return model
    if str(model) == "tiny":
        return tiny_engine(**options)
    return TorchEngine.from_pretrained(model, **options)


def grpo(model: str | Path | TorchEngine = "tiny", **options: Any) -> GRPO:
    from relight_torch.grpo import GRPO

    return GRPO(engine(model), **options)


def reinforce_pp(model: str | Path | TorchEngine = "tiny", **options: Any) -> GRPO:
    from relight_torch.grpo import GRPO

    return GRPO(engine(model), estimator="reinforce++", **options)


def sft(model: str | Path | TorchEngine = "tiny", **options: Any) -> SFT:
    from relight_torch.sft import SFT

    return SFT(engine(model), **options)
