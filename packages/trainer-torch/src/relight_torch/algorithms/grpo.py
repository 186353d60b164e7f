"""GRPO and REINFORCE++ over transitions: relight-torch's RL algorithm.

Each transition is one LLM call with the credit the core assigned it (under LightningRL every call
of an episode carries the episode's reward). Advantages come from :mod:`relight_torch.algorithms.advantages`,
then the policy takes PPO's clipped step against the logprobs recorded when the call was sampled,
with a token-mean loss (or one where each episode counts once: ``per_episode``) and an optional KL
penalty to the starting policy. Samples an older policy drew (asynchronous training) are corrected
first (:mod:`relight_torch.algorithms.offpolicy`: decoupled PPO with truncated importance sampling); calls
recorded without logprobs (retokenized by the gateway) are anchored to the policy's own logprobs
before the first step (:mod:`relight_torch.algorithms.anchors`). The engine serves the new weights as soon as
the update returns, under a policy version one higher (trained in place, or swapped in live: see
``live_updates``).
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal

import torch
from pydantic import JsonValue

from relight.records import Transition
from relight.transitions.learning_signal import flat_groups, group_key
from relight_torch.algorithms.advantages import episode_weights, grpo_advantages, reinforce_pp_advantages
from relight_torch.algorithms.anchors import anchor_missing_logprobs
from relight_torch.algorithms.objectives import PolicyGradientLoss
from relight_torch.algorithms.offpolicy import correct_stale_samples, update_weight_metrics, weigh_in_the_update
from relight_torch.algorithms.policy_algorithm import PolicyAlgorithm
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.process import LearnerProcess

__all__ = ["GRPO", "Estimator", "UpdateCallback", "with_signal_samples"]

Estimator = Literal["grpo", "reinforce++"]
UpdateCallback = Callable[[Sequence[Transition], Mapping[str, float]], None]
"""Called after each update with its transitions and metrics (progress bars, custom logging)."""


class GRPO(PolicyAlgorithm):
    """Train ``engine``'s model with group-relative policy optimisation (or REINFORCE++).

    Args:
        engine: Serves the policy that is trained in place.
        estimator: ``"grpo"`` (group mean and standard deviation) or ``"reinforce++"`` (group mean,
            then whitened over the batch).
        lr: AdamW's learning rate.
        clip: PPO's ε.
        kl_coef: Weight of a k3 KL penalty to a frozen copy of the starting policy; 0 keeps no copy.
        tis_cap: The truncation of the importance weights of samples an older policy drew (asynchronous
            training; see :mod:`relight_torch.algorithms.offpolicy`); None trains them as if on-policy.
        scale_by_std: GRPO divides by the group's deviation; False is Dr. GRPO.
        per_episode: GRPO only: each episode (rollout) counts once, in its group's mean and deviation
            and in the loss, however many calls and tokens it has
            (:func:`~relight_torch.algorithms.advantages.episode_weights`); False counts each call and each
            token, as verl and Agent Lightning do.
        mini_batches: Optimizer steps per update, each on a disjoint shuffled part of the batch.
        epochs: Passes over the batch per update.
        token_budget: Most tokens in one forward/backward pass (gradient accumulation does the rest).
        max_grad_norm: Gradient clipping.
        seed: Seeds the mini-batch shuffle.
        callbacks: Called after each update with its transitions and metrics.
    """

    skips_flat_groups = True
    """A group whose rewards are all equal is left out of the update (:func:`with_signal_samples`), so the
    store's record of what was trained leaves its calls out (:mod:`relight.transitions.trained_calls`)."""
    engine_numerics_differ = False
    """True where the engine samples with other numerics than the learner's forward pass (vLLM): truncated
    importance sampling then corrects every sample, not only stale ones."""

    def __init__(
        self,
        engine: TorchEngine,
        *,
        estimator: Estimator = "grpo",
        lr: float = 2e-4,
        clip: float = 0.2,
        kl_coef: float = 0.0,
        tis_cap: float | None = 2.0,
        scale_by_std: bool = True,
        per_episode: bool = False,
        mini_batches: int = 1,
        epochs: int = 1,
        token_budget: int = 4096,
        max_grad_norm: float = 1.0,
        seed: int = 0,
        callbacks: Sequence[UpdateCallback] = (),
        **learner_options: Any,
    ) -> None:
        if estimator not in ("grpo", "reinforce++"):
            raise ValueError(f"estimator must be 'grpo' or 'reinforce++', got {estimator!r}")
        if per_episode and estimator != "grpo":
            raise ValueError(f"per_episode applies to estimator='grpo' only, got estimator={estimator!r}")
        if mini_batches < 1 or epochs < 1:
            raise ValueError(f"mini_batches and epochs must be at least 1, got {mini_batches} and {epochs}")
        super().__init__(
            engine, seed=seed, lr=lr, token_budget=token_budget, max_grad_norm=max_grad_norm, **learner_options
        )
        self.estimator = estimator
        self.scale_by_std = scale_by_std
        self.per_episode = per_episode
        self.tis_cap = tis_cap
        self.mini_batches = mini_batches
        self.epochs = epochs
        self.callbacks = list(callbacks)
        reference = copy.deepcopy(engine.model).requires_grad_(False) if kl_coef > 0 else None
        self.loss = PolicyGradientLoss(clip=clip, reference=reference, kl_coef=kl_coef, tis_cap=tis_cap)

    @property
    def settings(self) -> dict[str, JsonValue]:
        return {
            **super().settings,
            "estimator": self.estimator,
            "clip": self.loss.clip,
            "kl_coef": self.loss.kl_coef,
            "tis_cap": self.tis_cap,
            "scale_by_std": self.scale_by_std,
            "per_episode": self.per_episode,
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
        kept, samples, flat = with_signal_samples(trainable, all_samples)
        rewards = [t.reward for t in trainable]
        counts = {
            "groups_skipped": float(flat),
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
        # Left-out samples' loss is zero; dividing by every token's count keeps the step the full batch's.
        per_token = sum(len(s.response_ids) for s in all_samples) / sum(len(s.response_ids) for s in samples)
        steps: list[dict[str, float]] = []
        with changing_weights():
            for _ in range(self.epochs):
                order = list(range(len(samples)))
                self.rng.shuffle(order)
                for part in range(self.mini_batches):
                    chosen = [samples[i] for i in order[part :: self.mini_batches]]
                    if chosen:
                        normalizer = per_token * sum(len(s.response_ids) for s in chosen)
                        steps.append(learner.update(chosen, self.loss, normalizer=normalizer))
        metrics = {name: statistics.fmean(step[name] for step in steps) for name in steps[0]}
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
        """Transitions as learner samples, with this estimator's advantages."""
        rewards = [t.reward for t in transitions]
        groups = [t.group_id for t in transitions]
        lengths = [len(t.response_token_ids) for t in transitions]
        if self.per_episode:
            episodes = [t.rollout_id for t in transitions]
            advantages = grpo_advantages(rewards, groups, episode_ids=episodes, scale_by_std=self.scale_by_std)
            advantages *= torch.tensor(episode_weights(episodes, lengths))  # exact for PPO's clipped term: w > 0
        elif self.estimator == "grpo":
            advantages = grpo_advantages(rewards, groups, scale_by_std=self.scale_by_std)
        else:
            advantages = reinforce_pp_advantages(rewards, groups, lengths)
        return [
            Sample(t.prompt_token_ids, t.response_token_ids, float(a), t.response_logprobs)
            for t, a in zip(transitions, advantages.tolist(), strict=True)
        ]


def with_signal_samples(
    transitions: Sequence[Transition], samples: Sequence[Sample]
) -> tuple[list[Transition], list[Sample], int]:
    """The transitions and samples of groups whose rewards differ, and how many groups were left out.

    A group whose rewards are all equal has zero advantage everywhere, so its loss and gradient
    are zero (its KL term aside): leaving it out before the forward pass saves the pass and
    changes nothing else. Advantages are computed before, over the whole batch, as REINFORCE++
    whitens over the batch.
    """
    flat = flat_groups(transitions)
    kept = [(t, s) for t, s in zip(transitions, samples, strict=True) if group_key(t) not in flat]
    return [t for t, _ in kept], [s for _, s in kept], len(flat)
