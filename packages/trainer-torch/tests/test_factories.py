"""Algorithms built from a model name, as a script does: the tiny model or a saved policy's folder."""

from pathlib import Path
from typing import Any

from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.sft import SFT
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine


def torch_engine(model: str | Path) -> TorchEngine:
    """The engine for ``model``: ``"tiny"`` (the built-in tiny model) or a local Hugging Face directory."""
    return tiny_engine() if str(model) == "tiny" else TorchEngine.from_pretrained(model)


def build_reinforce_pp(model: str | Path, **options: Any) -> GRPO:
    return GRPO(torch_engine(model), estimator="reinforce++", **options)


def build_sft(model: str | Path, **options: Any) -> SFT:
    return SFT(torch_engine(model), **options)


def test_factories_build_on_the_tiny_model_or_a_local_directory(tmp_path: Path) -> None:
    grpo = build_reinforce_pp("tiny", lr=1e-3)
    assert isinstance(grpo, GRPO)
    assert grpo.estimator == "reinforce++"
    grpo.save(tmp_path)
    sft = build_sft(tmp_path)
    assert isinstance(sft, SFT)
    assert sft.model == grpo.model  # a saved policy keeps its name, whatever its folder is called
    for algorithm in (grpo, sft):
        algorithm.engine.close()
