"""Checkpoints in the Hugging Face layout, plus what resuming training needs.

A checkpoint directory is an ordinary ``save_pretrained`` directory (``config.json``,
``model.safetensors``, the tokenizer files), so ``AutoModelForCausalLM.from_pretrained(directory)``
loads the trained policy, and ``trainer_state.pt`` beside them: the optimizer, the step, the
policy version and every random generator's state, so that a resumed run takes exactly the step
the interrupted one would have taken next.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from relight_torch.models.naming import name_model

__all__ = ["TRAINER_STATE", "load_checkpoint", "save_checkpoint"]

TRAINER_STATE = "trainer_state.pt"


def save_checkpoint(
    directory: str | Path,
    *,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    state: dict[str, Any],
    generators: dict[str, torch.Generator] | None = None,
    name: str | None = None,
) -> Path:
    """Write the model and tokenizer with ``save_pretrained`` and ``state`` plus the RNG states beside them.

    ``name`` (the model name the engine answered to) goes into ``config.json``, so the checkpoint is
    served under it again (:func:`relight_torch.models.naming.model_name`) rather than as ``step-<n>``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with _quiet_progress():
        model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if name is not None:
        name_model(directory, name)
    rng = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {name: generator.get_state() for name, generator in (generators or {}).items()},
    }
    torch.save({"state": state, "rng": rng}, directory / TRAINER_STATE)
    return directory


def load_checkpoint(
    directory: str | Path,
    *,
    model: PreTrainedModel,
    generators: dict[str, torch.Generator] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` in place, restore the RNGs, and return the saved ``state``.

    Raises:
        FileNotFoundError: ``directory`` holds no safetensors weights or no ``trainer_state.pt``.
        ValueError: the weights do not fit the model (a parameter missing or unknown).
    """
    directory = Path(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {directory}; is it a checkpoint directory?")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(file, device=str(model.device)))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    untied = [name for name in missing if name not in _tied_names(model)]
    if untied or unexpected:
        raise ValueError(f"the weights in {directory} do not fit the model: missing {untied}, unexpected {unexpected}")
    saved = torch.load(directory / TRAINER_STATE, weights_only=False)
    rng = saved["rng"]
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"]:
        torch.cuda.set_rng_state_all(rng["cuda"])
    for name, generator in (generators or {}).items():
        generator.set_state(rng["generators"][name])
    return saved["state"]


@contextmanager
def _quiet_progress() -> Iterator[None]:
    """transformers draws a progress bar per save; a checkpoint every step should not."""
    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def _tied_names(model: PreTrainedModel) -> set[str]:
    """Parameters that share storage with an earlier one (tied embeddings): save_pretrained writes only the first."""
    seen: set[int] = set()
    tied: set[str] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen:
            tied.add(name)
        seen.add(pointer)
    return tied
