"""GRPO and REINFORCE++ over transitions: relight-torch's RL algorithm.

Each transition is one LLM call with the credit the core assigned it (under LightningRL every call
of an episode carries the episode's reward). Advantages come from :mod:`relight_torch.algorithms.advantages`,
then the policy takes PPO's clipped step against the logprobs recorded when the call was sampled, with
an optional KL penalty to the starting policy. The options carry the names of TRL's ``GRPOTrainer``
(``loss_type``, ``scale_rewards``, ``epsilon``, ``epsilon_high``, ``beta``), and for equal settings the loss
and its gradients are TRL's (the documentation's GRPO page maps one onto the other). Samples an older
policy drew (asynchronous training) are corrected first (:mod:`relight_torch.algorithms.offpolicy`:
decoupled PPO with truncated importance sampling); calls recorded without logprobs (retokenized by the
gateway) are anchored to the policy's own logprobs before the first step
(:mod:`relight_torch.algorithms.anchors`). The engine serves the new weights as soon as the update
returns, under a policy version one higher (trained in place, or swapped in live: see ``live_updates``).
"""

from __future__ import annotations

import copy
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal

from pydantic import JsonValue

from relight.records import Transition
from relight.transitions.learning_signal import flat_groups, group_key
from relight_torch.algorithms.advantages import (
    SCALE_REWARDS,
    ScaleRewards,
    episode_weights,
    grpo_advantages,
    reinforce_pp_advantages,
)
from relight_torch.algorithms.anchors import anchor_missing_logprobs
from relight_torch.algorithms.objectives import PolicyGradientLoss
from relight_torch.algorithms.offpolicy import correct_stale_samples, update_weight_metrics, weigh_in_the_update
from relight_torch.algorithms.policy_algorithm import PolicyAlgorithm
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.process import LearnerProcess

__all__ = ["GRPO", "LOSS_TYPES", "Estimator", "LossType", "UpdateCallback", "with_signal_samples"]

Estimator = Literal["grpo", "reinforce++"]
LossType = Literal["dapo", "bnpo", "grpo", "dr_grpo"]
"""How the tokens' terms make the loss, by TRL's names (the documentation's GRPO page says more):

- ``"dapo"``: their sum over the update batch's token count (every token counts alike, whatever its
  sequence's length);
- ``"bnpo"``: their sum over the optimizer step's token count (the same as ``"dapo"`` with one step per update);
- ``"grpo"``: each episode's token mean, averaged over the episodes (every episode counts alike: a long
  episode's tokens count less each);
- ``"dr_grpo"``: their sum over episodes × ``max_completion_length``, a constant (Dr. GRPO: no length bias).
"""
LOSS_TYPES: tuple[LossType, ...] = ("dapo", "bnpo", "grpo", "dr_grpo")
UpdateCallback = Callable[[Sequence[Transition], Mapping[str, float]], None]
"""Called after each update with its transitions and metrics (progress bars, custom logging)."""


class GRPO(PolicyAlgorithm):
    """Train ``engine``'s model with group-relative policy optimisation (or REINFORCE++).

    Args:
        engine: Serves the policy that is trained in place.
        estimator: ``"grpo"`` (group mean and standard deviation) or ``"reinforce++"`` (group mean,
            then whitened over the batch).
        loss_type: How the tokens' terms make the loss (:data:`LossType`): ``"dapo"`` (the default, as
            TRL's), ``"bnpo"``, ``"grpo"`` or ``"dr_grpo"``. An episode is a rollout, however many calls it
            made: with ``"grpo"`` it also counts once in its group's mean and deviation
            (:func:`~relight_torch.algorithms.advantages.episode_weights`).
        scale_rewards: GRPO only: what a reward less its group's mean is divided by: the group's standard
            deviation (``"group"``), the batch's (``"batch"``), or nothing (``"none"``, as Dr. GRPO).
        epsilon: PPO's ε: the ratio is clipped to ``[1 - epsilon, 1 + epsilon_high]``.
        epsilon_high: The clip range's upper side; None is ``epsilon`` (DAPO's "clip higher" raises it).
        beta: Weight of a k3 KL penalty to a frozen copy of the starting policy; 0 keeps no copy. With
            ``beta > 0`` groups whose rewards are all equal are trained too (their KL term is not zero).
        std_epsilon: Added to the deviation GRPO divides by: 1e-6 as verl (relight-verl sees the same
            advantages); TRL adds 1e-4.
        max_completion_length: The most response tokens an episode may have: ``"dr_grpo"``'s constant.
        lr: AdamW's learning rate.
        tis_cap: The truncation of the importance weights of samples an older policy drew (asynchronous
            training; see :mod:`relight_torch.algorithms.offpolicy`); None trains them as if on-policy.
        mini_batches: Optimizer steps per update, each on a disjoint shuffled part of the batch.
        epochs: Passes over the batch per update.
        token_budget: Most tokens in one forward/backward pass (gradient accumulation does the rest).
        max_grad_norm: Gradient clipping.
        seed: Seeds the mini-batch shuffle.
        callbacks: Called after each update with its transitions and metrics.
        learner_options: For the learner (``optimizer``, ``betas``, …). The former names ``clip``
            (``epsilon``), ``kl_coef`` (``beta``), ``scale_by_std`` (``scale_rewards``) and ``per_episode``
            (``loss_type="grpo"``) still work, with a ``DeprecationWarning``.
    """

    skips_flat_groups = True
    """A group whose rewards are all equal is left out of the update (:func:`with_signal_samples`), so the
    store's record of what was trained leaves its calls out (:mod:`relight.transitions.trained_calls`).
    False on an instance with a KL penalty, which trains every group."""
    engine_numerics_differ = False
    """True where the engine samples with other numerics than the learner's forward pass (vLLM): truncated
    importance sampling then corrects every sample, not only stale ones."""

    def __init__(
        self,
        engine: TorchEngine,
        *,
        estimator: Estimator = "grpo",
        loss_type: LossType = "dapo",
        scale_rewards: ScaleRewards = "group",
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        beta: float = 0.0,
        std_epsilon: float = 1e-6,
        max_completion_length: int | None = None,
        lr: float = 2e-4,
        tis_cap: float | None = 2.0,
        mini_batches: int = 1,
        epochs: int = 1,
        token_budget: int = 4096,
        max_grad_norm: float = 1.0,
        seed: int = 0,
        callbacks: Sequence[UpdateCallback] = (),
        **learner_options: Any,
    ) -> None:
        renamed = _renamed_options(learner_options)
        loss_type = renamed.get("loss_type", loss_type)
        scale_rewards = renamed.get("scale_rewards", scale_rewards)
        epsilon = renamed.get("epsilon", epsilon)
        beta = renamed.get("beta", beta)
        if estimator not in ("grpo", "reinforce++"):
            raise ValueError(f"estimator must be 'grpo' or 'reinforce++', got {estimator!r}")
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}; got {loss_type!r}")
        if scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}; got {scale_rewards!r}")
        if estimator != "grpo" and scale_rewards != "group":
            raise ValueError(
                f"scale_rewards applies to estimator='grpo' only (REINFORCE++ whitens over the batch), "
                f"got scale_rewards={scale_rewards!r} with estimator={estimator!r}"
            )
        if loss_type == "dr_grpo" and (max_completion_length is None or max_completion_length < 1):
            raise ValueError(
                "loss_type='dr_grpo' divides by episodes x max_completion_length: give max_completion_length, "
                f"the most response tokens an episode may have (got {max_completion_length!r})"
            )
        if mini_batches < 1 or epochs < 1:
            raise ValueError(f"mini_batches and epochs must be at least 1, got {mini_batches} and {epochs}")
        super().__init__(
            engine, seed=seed, lr=lr, token_budget=token_budget, max_grad_norm=max_grad_norm, **learner_options
        )
        self.estimator = estimator
        self.loss_type: LossType = loss_type
        self.scale_rewards: ScaleRewards = scale_rewards
        self.std_epsilon = std_epsilon
        self.max_completion_length = max_completion_length
        self.tis_cap = tis_cap
        self.mini_batches = mini_batches
        self.epochs = epochs
        self.callbacks = list(callbacks)
        self.skips_flat_groups = beta == 0
        reference = copy.deepcopy(engine.model).requires_grad_(False) if beta > 0 else None
        self.loss = PolicyGradientLoss(
            epsilon=epsilon, epsilon_high=epsilon_high, reference=reference, beta=beta, tis_cap=tis_cap
        )

    @property
    def settings(self) -> dict[str, JsonValue]:
        return {
            **super().settings,
            "estimator": self.estimator,
            "loss_type": self.loss_type,
            "scale_rewards": self.scale_rewards,
            "epsilon": self.loss.epsilon,
            "epsilon_high": self.loss.epsilon_high,
            "beta": self.loss.beta,
            "std_epsilon": self.std_epsilon,
            "max_completion_length": self.max_completion_length,
            "tis_cap": self.tis_cap,
            "mini_batches": self.mini_batches,
            "epochs": self.epochs,
        }

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        """One update on a batch; runs on a worker thread so the event loop (gateway, store) stays live."""
        metrics = await self.off_the_loop(self.learn, transitions)
        for callback in self.callbacks:
            callback(transitions, metrics)
        return metrics

    def learn(self, transitions: Sequence[Transition]) -> dict[str, float]:
        """:meth:`update`'s work, synchronously: advantages, then the clipped policy-gradient steps."""
        return self.learn_with(transitions, self.learner, self.policy_version, self.changing_weights)

    def learn_with(
        self,
        transitions: Sequence[Transition],
        learner: Learner | LearnerProcess,
        version: int,
        changing_weights: Callable[[], AbstractContextManager[None]],
    ) -> dict[str, float]:
        """One policy's update: ``learner`` steps its weights, ``version`` is the policy's current one, and
        ``changing_weights()`` surrounds the steps (the new weights serve once it ends). An algorithm
        training several policies calls it once per policy, each with its own transitions and learner."""
        trainable = [t for t in transitions if t.response_token_ids]
        if not trainable:
            raise ValueError(f"none of the {len(transitions)} transitions has response tokens to train on")
        all_samples = self.samples(trainable)
        if self.skips_flat_groups:
            kept, samples, flat = with_signal_samples(trainable, all_samples)
        else:  # the KL term of a flat group is not zero: every group is trained
            kept, samples, flat = list(trainable), list(all_samples), len(flat_groups(trainable))
        rewards = [t.reward for t in trainable]
        counts = {
            "groups_skipped": float(flat) if self.skips_flat_groups else 0.0,
            "transition_reward_mean": statistics.fmean(rewards),
            "response_tokens_mean": statistics.fmean(len(t.response_token_ids) for t in trainable),
        }
        if not samples:  # every group's rewards are equal: nothing to learn, the weights stay as they are
            return {**counts, "update_skipped": 1.0}
        correction: dict[str, float] = {}
        weighed_in_step = self.tis_cap is not None and self.epochs * self.mini_batches == 1
        if weighed_in_step:  # one optimizer step: its own forward pass weighs the samples
            samples, correction = weigh_in_the_update(
                samples, kept, version=version, every_sample=self.engine_numerics_differ
            )
        elif self.tis_cap is not None:
            samples, correction = correct_stale_samples(
                samples,
                kept,
                learner,
                version=version,
                cap=self.tis_cap,
                every_sample=self.engine_numerics_differ,
            )
        samples, anchored = anchor_missing_logprobs(samples, learner, steps=self.epochs * self.mini_batches)
        normalizer = self._normalizer(trainable, all_samples, samples)
        steps: list[dict[str, float]] = []
        began = time.perf_counter()
        with changing_weights():
            for _ in range(self.epochs):
                order = list(range(len(samples)))
                self.rng.shuffle(order)
                for part in range(self.mini_batches):
                    chosen = [samples[i] for i in order[part :: self.mini_batches]]
                    if chosen:
                        steps.append(learner.update(chosen, self.loss, normalizer=normalizer(chosen)))
            learned = time.perf_counter()
        metrics = {name: statistics.fmean(step[name] for step in steps) for name in steps[0]}
        # The update's own parts, beside the loop's time_update_s (which also builds the transitions):
        # the optimizer steps, and making the new weights the served ones (a swap, or a push into vLLM).
        metrics |= {"time_learner_s": learned - began, "time_serve_weights_s": time.perf_counter() - learned}
        if weighed_in_step:
            correction |= update_weight_metrics(metrics, every_sample=self.engine_numerics_differ)
        metrics |= counts | {
            "first_ratio": steps[0]["ratio"],
            "advantage_abs_mean": statistics.fmean(abs(s.advantage) for s in all_samples),
            "off_policy_transitions": float(sum(t.policy_version != version for t in trainable)),
            **correction,
            **anchored,
        }
        return metrics

    def set_policies(self, policies: Mapping[str, object]) -> None:
        """Refused: TorchEngine serves one set of weights, so this algorithm trains one policy."""
        raise TypeError(
            f"{type(self).__name__} on TorchEngine trains one policy, not {len(policies)} "
            f"({', '.join(policies)}): several policies, one LoRA adapter each, need the vLLM engine "
            "(relight_torch.vllm.VLLMGRPO)"
        )

    def advantages(self, transitions: Sequence[Transition]) -> list[float]:
        """The advantage each transition gets in an update (what the dashboard shows per call)."""
        return [sample.advantage for sample in self.samples(transitions)]

    def samples(self, transitions: Sequence[Transition]) -> list[Sample]:
        """Transitions as learner samples, with this estimator's advantages and this loss type's weights."""
        rewards = [t.reward for t in transitions]
        groups = [t.group_id for t in transitions]
        lengths = [len(t.response_token_ids) for t in transitions]
        episodes = [t.rollout_id for t in transitions]
        per_episode = self.loss_type == "grpo"
        if self.estimator == "grpo":
            advantages = grpo_advantages(
                rewards,
                groups,
                episode_ids=episodes if per_episode else None,
                scale_rewards=self.scale_rewards,
                std_epsilon=self.std_epsilon,
            ).tolist()
        else:
            advantages = reinforce_pp_advantages(rewards, groups, lengths).tolist()
        weights = episode_weights(episodes, lengths) if per_episode else [1.0] * len(transitions)
        return [
            Sample(t.prompt_token_ids, t.response_token_ids, float(a), t.response_logprobs, loss_weight=w)
            for t, a, w in zip(transitions, advantages, weights, strict=True)
        ]

    def _normalizer(
        self, transitions: Sequence[Transition], every: Sequence[Sample], trained: Sequence[Sample]
    ) -> Callable[[Sequence[Sample]], float]:
        """What an optimizer step on ``chosen`` samples divides its summed loss by, for this ``loss_type``.

        ``every`` is the update's batch, ``trained`` what is left of it once groups without signal are out
        (their loss is zero): "bnpo" and "grpo" count those groups' tokens as the step's own, "dapo" and
        "dr_grpo" the whole batch's, each optimizer step taking its share.
        """
        steps = self.mini_batches

        def weighed_tokens(samples: Sequence[Sample]) -> float:
            return sum(s.loss_weight * len(s.response_ids) for s in samples)

        if self.loss_type == "dapo":
            total = weighed_tokens(every) / steps
            return lambda chosen: total
        if self.loss_type == "dr_grpo":
            episodes = len({t.rollout_id for t in transitions})
            constant = episodes * float(self.max_completion_length or 1) / steps
            return lambda chosen: constant
        share = weighed_tokens(every) / weighed_tokens(trained)
        return lambda chosen: share * weighed_tokens(chosen)


def _renamed_options(options: dict[str, Any]) -> dict[str, Any]:
    """Takes GRPO's options under their former names out of ``options`` and returns them under their new
    names, warning once for each (``DeprecationWarning``)."""
    found: dict[str, Any] = {}
    if "clip" in options:
        found["epsilon"] = options.pop("clip")
        _deprecated("clip=", "epsilon= (and epsilon_high= for the upper side)")
    if "kl_coef" in options:
        found["beta"] = options.pop("kl_coef")
        _deprecated("kl_coef=", "beta=")
    if "scale_by_std" in options:
        found["scale_rewards"] = "group" if options.pop("scale_by_std") else "none"
        _deprecated("scale_by_std=", "scale_rewards='group' (True) or 'none' (False)")
    if "per_episode" in options:
        found["loss_type"] = "grpo" if options.pop("per_episode") else "dapo"
        _deprecated("per_episode=", "loss_type='grpo' (True) or 'dapo' (False)")
    return found


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"GRPO({old}...) is deprecated: use {new}", DeprecationWarning, stacklevel=4)


def with_signal_samples(
    transitions: Sequence[Transition], samples: Sequence[Sample]
) -> tuple[list[Transition], list[Sample], int]:
    """The transitions and samples of groups whose rewards differ, and how many groups were left out.

    A group whose rewards are all equal has zero advantage everywhere, so without a KL penalty its loss
    and gradient are zero: leaving it out before the forward pass saves the pass and changes nothing
    else. Advantages are computed before, over the whole batch, as REINFORCE++ whitens over the batch.
    """
    flat = flat_groups(transitions)
    kept = [(t, s) for t, s in zip(transitions, samples, strict=True) if group_key(t) not in flat]
    return [t for t, _ in kept], [s for _, s in kept], len(flat)
