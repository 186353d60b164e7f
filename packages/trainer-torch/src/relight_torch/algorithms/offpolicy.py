"""Off-policy correction for samples an older policy drew (asynchronous training): decoupled PPO with TIS.

In asynchronous training a transition may have been sampled ``s`` policy versions ago. Its recorded
(behaviour) logprobs then belong to a policy the learner no longer has. Following AReaL's decoupled
PPO, such a sample's PPO ratio is taken against the *current* policy's logprobs (the proximal
policy, computed here without gradients before the update), so the trust region is measured from
where the learner is; and each token's policy-gradient term is weighted by the truncated importance
weight ``min(π_current / π_behaviour, cap)`` (truncated importance sampling, as in verl and
"Your efficient RL framework secretly brings you off-policy RL training"), which corrects for having
sampled from the behaviour policy while bounding the variance a very stale token could add.

A sample whose version is the current one is left as it is, so synchronous training is unchanged, unless
``every_sample``: an engine that is not the learner's own forward pass (vLLM, sampling in bfloat16 with
its own kernels) records logprobs that differ from the learner's even for the same weights, so every
sample is corrected the same way, and the size of that difference is reported.

An update of one optimizer step (one epoch, one mini-batch: the recipes' default) needs no pass of its
own for the proximal policy: it is the policy the step starts from, whose logprobs the step's forward
pass computes anyway. :func:`weigh_in_the_update` hands the behaviour logprobs to the loss, which takes
the PPO anchor and the truncated weights from that forward pass
(:class:`~relight_torch.algorithms.objectives.PolicyGradientLoss` with ``tis_cap``): the same step as
:func:`correct_stale_samples` followed by the update, for one forward pass less.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from relight.records import Transition
from relight_torch.algorithms.objectives import importance_weights
from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.process import LearnerProcess

__all__ = ["correct_stale_samples", "update_weight_metrics", "weigh_in_the_update"]


def correct_stale_samples(
    samples: Sequence[Sample],
    transitions: Sequence[Transition],
    learner: Learner | LearnerProcess,
    *,
    version: int,
    cap: float,
    every_sample: bool = False,
) -> tuple[list[Sample], dict[str, float]]:
    """``samples`` with the stale ones corrected, and the correction's metrics.

    Metrics: ``tis_samples`` (how many were corrected), ``tis_clipped_fraction`` (of their tokens, the
    share whose weight the cap truncated), ``tis_weight_mean`` (their mean weight after truncation) and
    ``sample_staleness_mean``/``sample_staleness_max`` over every sample; with ``every_sample``, also the
    mismatch between the engine's and the learner's logprobs over the corrected tokens
    (``logprob_delta_abs_mean``/``_max`` of |learner - engine|, and the untruncated importance ratio's
    ``is_ratio_min``/``_max``/``_std``).
    """
    if cap <= 0:
        raise ValueError(f"the importance-weight cap must be positive, got {cap}")
    stale, metrics = _stale(samples, transitions, version=version, every_sample=every_sample)
    if not stale:
        return list(samples), metrics
    corrected = list(samples)
    currents = learner.logprobs([samples[i] for i in stale])
    log_weights = [
        now - then
        for index, current in zip(stale, currents, strict=True)
        for now, then in zip(current, samples[index].old_logprobs or (), strict=True)
    ]
    truncated, stats = importance_weights(torch.tensor(log_weights, dtype=torch.float64), cap)
    weights: list[float] = truncated.tolist()
    start = 0
    for index, current in zip(stale, currents, strict=True):
        end = start + len(current)
        corrected[index] = dataclasses.replace(samples[index], old_logprobs=current, weights=weights[start:end])
        start = end
    metrics |= update_weight_metrics(stats, every_sample=every_sample)
    return corrected, metrics


def weigh_in_the_update(
    samples: Sequence[Sample], transitions: Sequence[Transition], *, version: int, every_sample: bool = False
) -> tuple[list[Sample], dict[str, float]]:
    """``samples`` with the ones :func:`correct_stale_samples` would correct left for the update's own
    forward pass to weigh: their recorded logprobs become ``behaviour_logprobs``, their anchor the
    policy the update starts from. Only for an update of one optimizer step.

    Metrics: ``tis_samples``, ``sample_staleness_mean``/``_max``; the loss's statistics give the rest
    (:func:`update_weight_metrics`).
    """
    stale, metrics = _stale(samples, transitions, version=version, every_sample=every_sample)
    weighed = list(samples)
    for index in stale:
        sample = samples[index]
        weighed[index] = dataclasses.replace(sample, old_logprobs=None, behaviour_logprobs=sample.old_logprobs)
    return weighed, metrics


def update_weight_metrics(update: dict[str, float], *, every_sample: bool = False) -> dict[str, float]:
    """Takes the importance weights' statistics (:func:`~relight_torch.algorithms.objectives.importance_weights`) out of
    ``update`` (an update's metrics, or the statistics themselves) and returns them as the correction's
    metrics; sums become means over the weighed tokens (token means of them too: the ratio of two is the
    ratio of the sums)."""
    sums = {name: update.pop(name, 0.0) for name in _WEIGHT_SUMS}
    extremes = {
        name: update.pop(name) for name in ("logprob_delta_abs_max", "is_ratio_min", "is_ratio_max") if name in update
    }
    tokens = sums["tis_tokens"]
    if not tokens:
        return {"tis_clipped_fraction": 0.0, "tis_weight_mean": 1.0}
    metrics = {"tis_clipped_fraction": sums["tis_clipped"] / tokens, "tis_weight_mean": sums["tis_weight"] / tokens}
    if every_sample:
        mean = sums["is_ratio"] / tokens
        metrics |= extremes | {
            "logprob_delta_abs_mean": sums["logprob_delta_abs"] / tokens,
            "is_ratio_std": math.sqrt(max(sums["is_ratio_sq"] / tokens - mean * mean, 0.0)),
        }
    return metrics


_WEIGHT_SUMS = ("tis_tokens", "tis_clipped", "tis_weight", "logprob_delta_abs", "is_ratio", "is_ratio_sq")


def _stale(
    samples: Sequence[Sample], transitions: Sequence[Transition], *, version: int, every_sample: bool
) -> tuple[list[int], dict[str, float]]:
    """The samples to correct (drawn by an older version, or every one with ``every_sample``; each with
    recorded logprobs), and the staleness metrics."""
    staleness = [version - t.policy_version if t.policy_version is not None else 0 for t in transitions]
    stale = [i for i, s in enumerate(staleness) if (s > 0 or every_sample) and samples[i].old_logprobs is not None]
    return stale, {
        "sample_staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "sample_staleness_max": float(max(staleness, default=0)),
        "tis_samples": float(len(stale)),
        "tis_clipped_fraction": 0.0,
        "tis_weight_mean": 1.0,
    }
