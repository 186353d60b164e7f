"""Asynchronous training on verl, up to the GPU boundary: the config verl composes, and verl's own
rollout correction on a relight batch whose stale logprobs differ from the actor's."""

from __future__ import annotations

import math

import pytest
import torch

from relight.records import Transition
from relight_verl.asynchronous import asynchronous, correct_off_policy
from relight_verl.batch import build_batch
from relight_verl.config import VerlConfig, to_verl_config


def test_asynchronous_config_turns_on_verls_decoupled_rollout_correction_with_the_cap() -> None:
    config = asynchronous(VerlConfig(model="Qwen/Qwen2.5-0.5B-Instruct", overrides=("trainer.val_before_train=false",)))
    assert config.recompute_old_logprobs
    verl = to_verl_config(config)
    correction = verl.algorithm.rollout_correction
    assert (correction.rollout_is, correction.rollout_is_threshold, correction.bypass_mode) == ("token", 2.0, False)
    assert verl.trainer.val_before_train is False  # the user's overrides are kept


def test_a_non_positive_cap_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="tis_cap"):
        asynchronous(VerlConfig(model="m"), tis_cap=0.0)


def test_stale_tokens_get_verls_truncated_importance_weights() -> None:
    behaviour = [-2.0, -0.5, -1.0]  # what vLLM sampled with, a policy version ago
    stale = Transition(
        rollout_id="ro-1",
        attempt_id="at-1",
        group_id="g",
        step=0,
        prompt_token_ids=[5, 6],
        response_token_ids=[7, 8, 9],
        response_logprobs=behaviour,
        reward=1.0,
        policy_version=0,
    )
    batch, _ = build_batch([stale], pad_token_id=0, max_prompt_length=4, max_response_length=4)
    assert batch is not None
    # The GPU boundary: the actor's recomputed logprobs (the proximal policy) arrive as old_log_probs.
    actor = torch.tensor([[-0.5, -0.6, -1.0]])
    batch.batch["old_log_probs"] = actor
    verl = to_verl_config(asynchronous(VerlConfig(model="m"), tis_cap=1.5))
    corrected, metrics = correct_off_policy(batch, verl.algorithm)
    weights = corrected.batch["rollout_is_weights"][0].tolist()
    expected = [min(math.exp(a - b), 1.5) for a, b in zip(actor[0].tolist(), behaviour, strict=True)]
    assert weights == pytest.approx(expected, rel=1e-5)
    assert any(key.startswith("rollout_corr/") for key in metrics)


def test_without_the_asynchronous_config_nothing_is_weighted() -> None:
    verl = to_verl_config(VerlConfig(model="m"))
    transition = Transition(
        rollout_id="ro-1",
        attempt_id="at-1",
        group_id="g",
        step=0,
        prompt_token_ids=[5],
        response_token_ids=[7],
        response_logprobs=[-1.0],
        reward=1.0,
    )
    batch, _ = build_batch([transition], pad_token_id=0, max_prompt_length=4, max_response_length=4)
    assert batch is not None
    corrected, metrics = correct_off_policy(batch, verl.algorithm)
    assert "rollout_is_weights" not in corrected.batch
    assert metrics == {}
