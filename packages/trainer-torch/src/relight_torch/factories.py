"""Build an engine or an algorithm from a model name: what ``python -m relight_torch.server`` and scripts use.

Factories import torch and transformers only when called, so importing this module stays cheap.
Each takes ``model``: ``"tiny"`` (the built-in tiny model), a local Hugging Face directory, or a
:class:`~relight_torch.engine.TorchEngine`. ``grpo`` and ``reinforce++`` also take ``engine="vllm"``: the
policy is then served by a vLLM server (:mod:`relight_torch.vllm`), with ``vllm`` (a dict of
:class:`~relight_torch.vllm.VLLMPolicy` options: ``lora``, ``url``, ``server``, …) saying how.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relight_torch.engine import TorchEngine
    from relight_torch.grpo import GRPO
    from relight_torch.sft import SFT


def torch_engine(model: str | Path | TorchEngine = "tiny", **options: Any) -> TorchEngine:
    """The engine for ``model`` (see the module docstring); ``options`` go to its constructor."""
    from relight_torch.engine import TorchEngine
    from relight_torch.tiny import tiny_engine

    if isinstance(model, TorchEngine):
        return model
    if str(model) == "tiny":
        return tiny_engine(**options)
    return TorchEngine.from_pretrained(model, **options)


def grpo(
    model: str | Path | TorchEngine = "tiny",
    *,
    engine: str = "torch",
    vllm: dict[str, Any] | None = None,
    **options: Any,
) -> GRPO:
    from relight_torch.grpo import GRPO

    if engine == "vllm":
        return vllm_grpo(model, vllm=vllm, **options)
    if engine != "torch":
        raise ValueError(f"engine must be 'torch' or 'vllm', got {engine!r}")
    return GRPO(torch_engine(model), **options)


def vllm_grpo(model: str | Path | TorchEngine, *, vllm: dict[str, Any] | None = None, **options: Any) -> GRPO:
    """GRPO with the policy served by vLLM; ``model`` is a Hugging Face folder (the tiny model has none)."""
    from relight_torch.vllm import VLLMGRPO, VLLMPolicy

    if not isinstance(model, str | Path) or str(model) == "tiny":
        raise ValueError(f"engine='vllm' serves a Hugging Face folder; got model={model!r}")
    return VLLMGRPO(VLLMPolicy(model, **(vllm or {})), **options)


def reinforce_pp(model: str | Path | TorchEngine = "tiny", **options: Any) -> GRPO:
    return grpo(model, estimator="reinforce++", **options)


def sft(model: str | Path | TorchEngine = "tiny", **options: Any) -> SFT:
    from relight_torch.sft import SFT

    return SFT(torch_engine(model), **options)
