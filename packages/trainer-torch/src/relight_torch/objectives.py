"""Per-token losses for :class:`relight_torch.learner.Learner`: each returns a sum over response tokens.

Summing (rather than averaging) inside a micro-batch is what lets the learner divide once by the
whole batch's token count and get the same token-mean loss however the batch was split.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from relight_torch.learner import Sample
from relight_torch.packing import PackedBatch, response_logprobs

__all__ = ["PolicyGradientLoss", "negative_log_likelihood"]


def negative_log_likelihood(
    logprobs: torch.Tensor, batch: PackedBatch, samples: Sequence[Sample]
) -> tuple[torch.Tensor, dict[str, float]]:
    """SFT: the summed negative logprob of the response tokens (the mask has zeroed padding)."""
    return -(logprobs * batch.response_mask).sum(), {}


class PolicyGradientLoss:
    """PPO's clipped surrogate with each sample's advantage, plus an optional KL penalty to a reference.

    Args:
        clip: ε of the ratio's clip range ``[1 - ε, 1 + ε]``.
        reference: A frozen copy of the starting policy; with ``kl_coef > 0`` the loss adds
            ``kl_coef`` times the k3 estimate of KL(policy ‖ reference) per token.
        kl_coef: The KL penalty's weight.
    """

    def __init__(self, *, clip: float = 0.2, reference: PreTrainedModel | None = None, kl_coef: float = 0.0) -> None:
        if kl_coef > 0 and reference is None:
            raise ValueError("kl_coef > 0 needs a reference model to measure the KL against")
        self.clip = clip
        self.reference = reference
        self.kl_coef = kl_coef

    def __call__(
        self, logprobs: torch.Tensor, batch: PackedBatch, samples: Sequence[Sample]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mask = batch.response_mask.to(logprobs.dtype)
        old = _old_logprobs(samples, logprobs)
        advantages = torch.tensor([s.advantage for s in samples], dtype=logprobs.dtype, device=logprobs.device)
        advantages = advantages.unsqueeze(1)
        ratio = torch.exp(logprobs - old)
        clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
        per_token = -torch.minimum(ratio * advantages, clipped * advantages) * _weights(samples, logprobs)
        stats = {
            "clip_fraction": float(((ratio - clipped).abs() > 0).to(mask.dtype).mul(mask).sum()),
            "ratio": float((ratio.detach() * mask).sum()),
        }
        if self.kl_coef > 0 and self.reference is not None:
            with torch.no_grad():
                reference = response_logprobs(self.reference, batch)
            log_ratio = reference - logprobs
            kl = torch.exp(log_ratio) - log_ratio - 1
            per_token = per_token + self.kl_coef * kl
            stats["kl"] = float((kl.detach() * mask).sum())
        return (per_token * mask).sum(), stats


def _weights(samples: Sequence[Sample], logprobs: torch.Tensor) -> torch.Tensor | float:
    """Each token's importance weight, shaped like ``logprobs``; 1.0 when no sample has any."""
    if all(sample.weights is None for sample in samples):
        return 1.0
    weights = torch.ones_like(logprobs)
    for row, sample in enumerate(samples):
        if sample.weights is not None:
            weights[row, : len(sample.weights)] = torch.tensor(sample.weights, dtype=weights.dtype)
    return weights


def _old_logprobs(samples: Sequence[Sample], logprobs: torch.Tensor) -> torch.Tensor:
    """The sampling policy's logprobs as a tensor shaped like ``logprobs``; the current ones where none were kept."""
    old = logprobs.detach().clone()
    for row, sample in enumerate(samples):
        if sample.old_logprobs is not None:
            old[row, : len(sample.old_logprobs)] = torch.tensor(sample.old_logprobs, dtype=old.dtype)
    return old
