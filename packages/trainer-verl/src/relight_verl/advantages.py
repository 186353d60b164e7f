"""Advantages for a relight batch by verl's own estimators (``verl.trainer.ppo.core_algos``).

The dispatch is the one verl's ``RayPPOTrainer`` does in ``compute_advantage``: GAE needs the
critic's values, GRPO takes the std-normalisation switch, every other estimator comes from verl's
registry with the group ids as ``index``. It lives here so that computing advantages on the driver
needs neither Ray nor the trainer module, and so the CPU tests run it exactly as training does.
"""

from __future__ import annotations

from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

__all__ = ["compute_advantages"]


def compute_advantages(batch: DataProto, algorithm: AlgoConfig) -> DataProto:
    """Fill ``advantages`` and ``returns`` in ``batch`` (and return it) by ``algorithm.adv_estimator``.

    ``batch`` is what :func:`relight_verl.batch.build_batch` made, with ``values`` added for GAE.
    """
    tensors = batch.batch
    estimator = str(algorithm.adv_estimator)
    if estimator == core_algos.AdvantageEstimator.GAE:
        if "values" not in tensors:
            raise ValueError("the gae estimator needs the critic's 'values' in the batch; compute them first")
        advantages, returns = core_algos.compute_gae_advantage_return(
            token_level_rewards=tensors["token_level_rewards"],
            values=tensors["values"],
            response_mask=tensors["response_mask"],
            gamma=algorithm.gamma,
            lam=algorithm.lam,
        )
    elif estimator == core_algos.AdvantageEstimator.GRPO:
        advantages, returns = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=tensors["token_level_rewards"],
            response_mask=tensors["response_mask"],
            index=batch.non_tensor_batch["uid"],
            norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        )
    else:
        estimate = core_algos.get_adv_estimator_fn(estimator)
        advantages, returns = estimate(
            token_level_rewards=tensors["token_level_rewards"],
            response_mask=tensors["response_mask"],
            index=batch.non_tensor_batch["uid"],
            config=algorithm,
        )
    tensors["advantages"] = advantages
    tensors["returns"] = returns
    return batch
