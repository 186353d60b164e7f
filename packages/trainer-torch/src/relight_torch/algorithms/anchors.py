"""The PPO anchor of samples recorded without logprobs: computed once, before the update's first step.

A call the gateway retokenized (the upstream gave text, no token ids) carries no logprobs: no
engine scored those ids. PPO's ratio ``π_θ / π_old`` needs ``π_old`` for every token, fixed for the
whole update. Without it the loss would fall back on the current policy's logprobs, recomputed at
each step: right for the update's first optimizer step, wrong for every later one (a second epoch,
a second mini-batch), where the ratio would stay 1 and clipping would never bound how far those
tokens move. So before the first step, such samples get the policy's own logprobs of their ids, as
verl's actor recomputes ``old_log_probs`` when a batch lacks them.

A sample an older policy drew that has no logprobs cannot be importance-weighted (its behaviour
policy is unknown): it is anchored to the current policy, as if on-policy, and counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.process import LearnerProcess

__all__ = ["anchor_missing_logprobs"]


def anchor_missing_logprobs(
    samples: Sequence[Sample], learner: Learner | LearnerProcess, *, steps: int
) -> tuple[list[Sample], dict[str, float]]:
    """``samples`` with the current policy's logprobs where none were recorded, when the update takes ``steps`` > 1.

    With a single optimizer step the current policy *is* the anchor, and the forward pass is saved.
    Metrics: ``samples_without_logprobs``, how many samples had none recorded.
    """
    missing = [i for i, s in enumerate(samples) if s.old_logprobs is None and s.behaviour_logprobs is None]
    metrics = {"samples_without_logprobs": float(len(missing))}
    if not missing or steps <= 1:
        return list(samples), metrics
    anchored = list(samples)
    for index, logprobs in zip(missing, learner.logprobs([samples[i] for i in missing]), strict=True):
        anchored[index] = dataclasses.replace(samples[index], old_logprobs=logprobs)
    return anchored, metrics
