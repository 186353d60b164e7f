"""relight-verl in asynchronous training (``Trainer(max_staleness=k)``): verl's own off-policy correction.

relight's runners, gateway and trainer do what verl's fully-async rollouter does (they keep
rollouts going while the actor trains, admit at most ``batch_size × (k + 1)`` groups and drop
samples more than ``k`` versions old: :mod:`relight.training.async_loop`), so verl's rollouter and its
``async_training.staleness_threshold`` are not used. What verl 0.9 brings is the correction of the
stale samples, its "decoupled" rollout correction (``algorithm.rollout_correction``, three
policies): the actor recomputes ``old_log_probs`` (the proximal policy, the PPO anchor) before the
update, and :func:`verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_add_to_batch`
weights each token by ``min(π_old / π_rollout, cap)`` from the ``rollout_log_probs`` vLLM sampled
with (truncated importance sampling). :func:`asynchronous` sets that up on a :class:`VerlConfig`;
:func:`correct_off_policy` is the step ``RayPPOTrainer.fit`` takes after recomputing, which
relight's PPO step calls at the same point.

verl's colocated actor and vLLM share the GPUs, so vLLM sleeps while the actor trains: a
:class:`~relight_verl.VerlAlgorithm` is updated with the gateway paused (it has no
``live_updates``), and asynchrony buys the overlap of tools, rewards and queued work with the update.
"""

from __future__ import annotations

import math
from typing import Any

from verl import DataProto

from relight_verl.config import VerlConfig

__all__ = ["asynchronous", "correct_off_policy"]

_CORRECTION = "algorithm.rollout_correction"


def asynchronous(config: VerlConfig, *, tis_cap: float = 2.0) -> VerlConfig:
    """``config`` for asynchronous training: the actor recomputes the PPO anchor, and stale samples get
    token-level truncated importance weights capped at ``tis_cap`` (verl's decoupled rollout correction)."""
    if not (math.isfinite(tis_cap) and tis_cap > 0):
        raise ValueError(f"tis_cap must be a positive number, got {tis_cap!r}")
    overrides = (
        f"{_CORRECTION}.rollout_is=token",
        f"{_CORRECTION}.rollout_is_threshold={tis_cap!r}",
        f"{_CORRECTION}.bypass_mode=false",
    )
    return config.model_copy(update={"recompute_old_logprobs": True, "overrides": (*config.overrides, *overrides)})


def correct_off_policy(batch: DataProto, algorithm_config: Any) -> tuple[DataProto, dict[str, float]]:
    """verl's rollout correction on a batch whose ``old_log_probs`` the actor has just recomputed.

    Does nothing unless the config asks for importance weights (``rollout_is``) and the batch has the
    logprobs vLLM sampled with. Returns the batch (with ``rollout_is_weights``, which verl's policy
    loss multiplies in) and verl's ``rollout_corr/`` metrics.
    """
    correction = algorithm_config.get("rollout_correction", None)
    if correction is None or correction.get("rollout_is") is None or "rollout_log_probs" not in batch.batch:
        return batch, {}
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    batch, metrics = compute_rollout_correction_and_add_to_batch(batch, correction)
    return batch, {key: float(value) for key, value in metrics.items()}
