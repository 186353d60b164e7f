"""The optimizers a :class:`~relight_torch.learner.learner.Learner` steps, and how it steps them with the least memory.

``"adamw"`` is ``torch.optim.AdamW`` with its fused kernel where the parameters allow it (floating point, on
the CPU or a GPU): one pass over a parameter's memory instead of one per arithmetic operation, which the
parameter-at-a-time step below would otherwise pay in full. AdamW keeps two moments per parameter: in float32
that is twice the weights (1.0 GiB for SmolLM2-135M), the largest thing a CPU update holds.
``optimizer="adamw8bit"`` keeps them in 8 bits with a float32 scale per block of 256 values (bitsandbytes'
block-wise AdamW8bit, the ``adamw_bnb_8bit`` of Hugging Face's Trainer): a quarter of a float32 moment, for
updates that follow float32 AdamW's closely but not to the bit. Parameters of fewer than 4,096 values keep
float32 moments.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch

__all__ = ["OPTIMIZERS", "OptimizerName", "make_optimizer", "step_dropping_gradients"]

OptimizerName = Literal["adamw", "adamw8bit"]
OPTIMIZERS: tuple[OptimizerName, ...] = ("adamw", "adamw8bit")


def make_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
) -> torch.optim.Optimizer:
    """``torch.optim.AdamW`` (fused where it can be) for ``"adamw"``, bitsandbytes' ``AdamW8bit`` for
    ``"adamw8bit"``."""
    if name == "adamw":
        params = list(params)
        fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas, fused=fused or None)
    if name == "adamw8bit":
        try:
            from bitsandbytes.optim import AdamW8bit  # type: ignore[import-untyped]
        except ImportError as error:
            raise ImportError(
                "optimizer='adamw8bit' needs bitsandbytes 0.50 or later (its CPU optimizers): "
                "pip install 'relight-torch[low-memory]'"
            ) from error
        optimizer: torch.optim.Optimizer = AdamW8bit(params, lr=lr, weight_decay=weight_decay, betas=betas)
        return optimizer
    raise ValueError(f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}; got {name!r}")


def step_dropping_gradients(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()`` one parameter at a time, smallest first, each gradient dropped once its parameter moved.

    The same step as one ``step()`` call (AdamW's update is per parameter), but the gradients and
    the optimizer's state never all exist at once: AdamW's first step allocates two moments per
    parameter, and a single call held them beside every gradient. Smallest first, because a step's
    temporaries are a few times its parameter's size (8-bit moments are made float32 again while
    they are used): the largest (a 49k-token embedding) then moves when the other gradients are
    gone. Between updates, while the engine samples, no gradient is kept either.
    """
    for group in optimizer.param_groups:
        params = group["params"]
        try:
            for param in sorted(params, key=lambda p: p.numel()):
                if param.grad is not None:
                    group["params"] = [param]
                    optimizer.step()
                    param.grad = None
        finally:
            group["params"] = params
