"""Per-token losses for :class:`relight_torch.learner.learner.Learner`: each returns a sum over response tokens.

Summing (rather than averaging) inside a micro-batch is what lets the learner divide once by the
whole batch's token count and get the same token-mean loss however the batch was split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from relight_torch.learner.learner import Sample
from relight_torch.learner.packing import PackedBatch, response_logprobs

__all__ = ["PolicyGradientLoss", "importance_weights", "negative_log_likelihood"]


def negative_log_likelihood(
    logprobs: torch.Tensor, batch: PackedBatch, samples: Sequence[Sample]
) -> tuple[torch.Tensor, dict[str, float]]:
    """SFT: the summed negative logprob of the response tokens (the mask has zeroed padding)."""
    return -(logprobs * batch.response_mask).sum(), {}


class PolicyGradientLoss:
    """PPO's clipped surrogate with each sample's advantage, plus an optional KL penalty to a reference.

    Per token ``-min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A) + beta KL``, as TRL's ``GRPOTrainer``
    writes it; how the tokens' terms are summed into a loss (TRL's ``loss_type``) is the algorithm's choice
    (:class:`~relight_torch.algorithms.grpo.GRPO`).

    Args:
        epsilon: The ratio's clip range's lower side, ``1 - epsilon`` (PPO's ε).
        epsilon_high: Its upper side, ``1 + epsilon_high``; None is ``epsilon`` (DAPO raises it: "clip higher").
        reference: A frozen copy of the starting policy; with ``beta > 0`` the loss adds ``beta`` times
            the k3 estimate of KL(policy ‖ reference) per token.
        beta: The KL penalty's weight.
        tis_cap: The truncation of the importance weights of samples with ``behaviour_logprobs``, each
            token's weight ``min(π_θ / π_behaviour, tis_cap)`` taken from this forward pass's logprobs
            (see :mod:`relight_torch.algorithms.offpolicy`); their statistics are sums over those tokens
            (``tis_tokens``, ``tis_clipped``, ``tis_weight``, ``logprob_delta_abs``, ``is_ratio``,
            ``is_ratio_sq``) and extremes (``logprob_delta_abs_max``, ``is_ratio_min``, ``is_ratio_max``).
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        reference: PreTrainedModel | None = None,
        beta: float = 0.0,
        tis_cap: float | None = None,
    ) -> None:
        if beta > 0 and reference is None:
            raise ValueError("beta > 0 needs a reference model to measure the KL against")
        if tis_cap is not None and tis_cap <= 0:
            raise ValueError(f"the importance-weight cap must be positive, got {tis_cap}")
        if epsilon < 0 or (epsilon_high is not None and epsilon_high < 0):
            raise ValueError(f"epsilon and epsilon_high must be at least 0, got {epsilon} and {epsilon_high}")
        self.epsilon = epsilon
        self.epsilon_high = epsilon if epsilon_high is None else epsilon_high
        self.reference = reference
        self.beta = beta
        self.tis_cap = tis_cap

    def __call__(
        self, logprobs: torch.Tensor, batch: PackedBatch, samples: Sequence[Sample]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mask = batch.response_mask.to(logprobs.dtype)
        old = _old_logprobs(samples, logprobs)
        advantages = torch.tensor([s.advantage for s in samples], dtype=logprobs.dtype, device=logprobs.device)
        advantages = advantages.unsqueeze(1)
        ratio = torch.exp(logprobs - old)
        clipped = ratio.clamp(1 - self.epsilon, 1 + self.epsilon_high)
        weights, weighed = self._importance_weights(samples, logprobs, mask)
        per_token = -torch.minimum(ratio * advantages, clipped * advantages) * weights
        stats = {
            "clip_fraction": float(((ratio - clipped).abs() > 0).to(mask.dtype).mul(mask).sum()),
            "ratio": float((ratio.detach() * mask).sum()),
            **weighed,
        }
        if self.beta > 0 and self.reference is not None:
            with torch.no_grad():
                reference = response_logprobs(self.reference, batch)
            log_ratio = reference - logprobs
            kl = torch.exp(log_ratio) - log_ratio - 1
            per_token = per_token + self.beta * kl
            stats["kl"] = float((kl.detach() * mask).sum())
        if any(sample.loss_weight != 1.0 for sample in samples):
            rows = torch.tensor([s.loss_weight for s in samples], dtype=logprobs.dtype, device=logprobs.device)
            mask = mask * rows.unsqueeze(1)
        return (per_token * mask).sum(), stats

    def _importance_weights(
        self, samples: Sequence[Sample], logprobs: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor | float, dict[str, float]]:
        """Each token's weight (the samples' own, or truncated importance weights against their
        ``behaviour_logprobs``), and the importance weights' statistics."""
        weights = _weights(samples, logprobs)
        if not any(sample.behaviour_logprobs is not None for sample in samples):
            return weights, {}
        if self.tis_cap is None:
            raise ValueError("samples with behaviour_logprobs need a PolicyGradientLoss with a tis_cap")
        behaviour = torch.zeros_like(logprobs, dtype=torch.float64)
        weighed = torch.zeros_like(mask, dtype=torch.bool)
        for row, sample in enumerate(samples):
            if sample.behaviour_logprobs is not None:
                length = len(sample.behaviour_logprobs)
                behaviour[row, :length] = torch.tensor(sample.behaviour_logprobs, dtype=torch.float64)
                weighed[row, :length] = True
        weighed &= mask.bool()
        truncated, stats = importance_weights((logprobs.detach().double() - behaviour)[weighed], self.tis_cap)
        weighted = weights.clone() if isinstance(weights, torch.Tensor) else torch.ones_like(logprobs)
        weighted[weighed] = truncated.to(weighted.dtype)
        return weighted, stats


def importance_weights(log_weights: torch.Tensor, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The truncated importance weights ``min(π / π_behaviour, cap)`` of per-token log weights, and their
    statistics: sums over the tokens (``tis_tokens``, ``tis_clipped``, ``tis_weight``, ``logprob_delta_abs``,
    ``is_ratio``, ``is_ratio_sq``) and, with any token, extremes (``logprob_delta_abs_max``,
    ``is_ratio_min``, ``is_ratio_max``); :func:`relight_torch.algorithms.offpolicy.update_weight_metrics` names them."""
    over = log_weights > math.log(cap)
    ratios = log_weights.exp()
    truncated = torch.where(over, torch.full_like(ratios, cap), ratios)
    stats = {
        "tis_tokens": float(log_weights.numel()),
        "tis_clipped": float(over.sum()),
        "tis_weight": float(truncated.sum()),
        "logprob_delta_abs": float(log_weights.abs().sum()),
        "is_ratio": float(ratios.sum()),
        "is_ratio_sq": float(ratios.square().sum()),
    }
    if log_weights.numel():
        stats |= {
            "logprob_delta_abs_max": float(log_weights.abs().max()),
            "is_ratio_min": float(ratios.min()),
            "is_ratio_max": float(ratios.max()),
        }
    return truncated, stats


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
