"""relight-torch's GRPO against TRL's ``GRPOTrainer``, term by term, on one fixed batch of SmolLM2-135M-Instruct ids.

TRL builds its own inputs: a ``rollout_func`` hands it the batch's prompt and completion ids, a reward
function hands it the rewards, and ``GRPOTrainer._generate_and_score_completions`` pads them and computes
the advantages (``scale_rewards``); ``GRPOTrainer.compute_loss`` then takes its loss. relight's GRPO learns
from the same ids and rewards as transitions. The losses and the gradients of the trained weights must be
equal, for each of TRL's loss types relight offers, each advantage scaling, an asymmetric clip range,
recorded logprobs of an older policy (so that ratios move and clip), and a KL penalty to a reference
that the policy has moved away from. The batch is two prompts x four completions, one group's rewards
all equal (relight leaves that group out of the forward pass; TRL computes it and gets zero).

Only the top decoder layer and the final norm train, on both sides: the gradients compared are theirs,
and the backward pass stays short.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from trl import GRPOConfig, GRPOTrainer

from relight.records import Transition
from relight_testing.torch_updates import final_gradients
from relight_torch.algorithms.advantages import ScaleRewards
from relight_torch.algorithms.grpo import GRPO, LossType
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner, Sample

QUESTIONS = ["12 * 7 =", "A prime above 10:"]
ANSWERS = [["84", " 84.", " 82", " I do not know"], [" 11", " 13", " Seventeen", " 29 is prime"]]
REWARDS = [1.0, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
"""The second group's rewards are all equal: zero advantage, no signal."""
STALE = [0.3, -0.25, 0.05, 0.4, -0.1, -0.35]
"""Added, in turn, to the policy's own logprobs to make an older policy's: ratios of 0.7 to 1.4, some clipped."""
MAX_COMPLETION_LENGTH = 8
TRAINED = ("model.layers.29.", "model.norm.")
"""The weights that train, on both sides: the top decoder layer and the final norm."""


@dataclass(frozen=True)
class Case:
    loss_type: LossType = "dapo"
    scale_rewards: ScaleRewards = "group"
    stale: bool = True
    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0

    def __str__(self) -> str:
        clip = f"clip {self.epsilon}-{self.epsilon_high or self.epsilon}"
        anchor = "stale" if self.stale else "on-policy"
        return f"{self.loss_type}, scale {self.scale_rewards}, {anchor}, {clip}, beta {self.beta}"


CASES = [
    Case(stale=False),
    Case(epsilon=0.1, epsilon_high=0.28),
    Case(loss_type="bnpo", scale_rewards="batch"),
    Case(loss_type="grpo"),
    Case(loss_type="dr_grpo", scale_rewards="none"),
    Case(loss_type="grpo", beta=0.04),
]


@dataclass
class Batch:
    prompts: list[str]
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]


@dataclass
class Sides:
    path: Path
    trl_model: PreTrainedModel
    tokenizer: Any
    engine: TorchEngine
    batch: Batch
    own: dict[bool, list[list[float]]] = field(default_factory=dict)
    """The policy's own logprobs of the batch, as it is and as :class:`moved_policy` moves it."""


@pytest.fixture(scope="module")
def sides(smollm2_path: Path) -> Iterator[Sides]:
    """SmolLM2 twice (one for TRL, one served by relight's engine), with only :data:`TRAINED` trainable."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    prompt_ids = [tokenizer.encode(question, add_special_tokens=False) for question in QUESTIONS]
    completion_ids = [
        [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]
        for group in ANSWERS
        for answer in group
    ]
    assert max(len(ids) for ids in completion_ids) <= MAX_COMPLETION_LENGTH
    assert len({len(ids) for ids in prompt_ids}) > 1  # prompts of two lengths: left padding is exercised
    trl_model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    batch = Batch(QUESTIONS, [prompt_ids[i // 4] for i in range(8)], completion_ids)
    with TorchEngine.from_pretrained(smollm2_path, name="smollm2") as engine:
        for model in (trl_model, engine.model):
            for name, parameter in model.named_parameters():
                parameter.requires_grad_(name.startswith(TRAINED))
        yield Sides(smollm2_path, trl_model, tokenizer, engine, batch)


def old_logprobs(sides: Sides, case: Case) -> list[list[float]]:
    """The policy's own logprobs of each completion (relight's learner computes them), or an older policy's."""
    key = case.beta > 0
    if key not in sides.own:
        engine, batch = sides.engine, sides.batch
        samples = [Sample(p, c) for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True)]
        with moved_policy(engine.model, case.beta):
            sides.own[key] = Learner(engine.model, pad_id=engine.pad_id).logprobs(samples)
    own = sides.own[key]
    if not case.stale:
        return own
    offsets = iter(STALE * 20)
    return [[min(value + next(offsets), -1e-3) for value in row] for row in own]


def relight_step(
    sides: Sides, case: Case, olds: list[list[float]], **options: Any
) -> tuple[float, dict[str, torch.Tensor]]:
    """relight's loss and the trained weights' gradients on the batch (``lr=0``: the weights stay as they are)."""
    batch, engine = sides.batch, sides.engine
    algorithm = GRPO(
        engine,
        loss_type=case.loss_type,
        scale_rewards=case.scale_rewards,
        epsilon=case.epsilon,
        epsilon_high=case.epsilon_high,
        beta=case.beta,
        max_completion_length=MAX_COMPLETION_LENGTH,
        lr=0.0,
        max_grad_norm=math.inf,
        **options,
    )
    transitions = [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id=f"task-{i // 4}",
            step=0,
            prompt_token_ids=batch.prompt_ids[i],
            response_token_ids=batch.completion_ids[i],
            response_logprobs=olds[i],
            reward=REWARDS[i],
            policy_version=algorithm.policy_version,
        )
        for i in range(8)
    ]
    named = dict(engine.model.named_parameters())
    with moved_policy(engine.model, case.beta), final_gradients(engine.model) as gradients:
        metrics = algorithm.learn(transitions)
    trained = [name for name, parameter in named.items() if parameter.requires_grad]
    return metrics["loss"], dict(zip(trained, gradients, strict=True))


def trl_step(
    sides: Sides, case: Case, olds: list[list[float]], tmp_path: Path
) -> tuple[float, dict[str, torch.Tensor]]:
    """TRL's loss and gradients: ``GRPOTrainer`` builds the inputs (padding, advantages) and computes the loss."""
    batch = sides.batch

    def rollout(prompts: list[str], trainer: GRPOTrainer) -> dict[str, Any]:
        assert prompts == [batch.prompts[i // 4] for i in range(8)]
        return {
            "prompt_ids": batch.prompt_ids,
            "completion_ids": batch.completion_ids,
            "logprobs": olds,
            "given_reward": REWARDS,
        }

    def given_reward(completions: list[str], given_reward: list[float], **_: Any) -> list[float]:
        return given_reward

    config = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=MAX_COMPLETION_LENGTH,
        loss_type=case.loss_type,
        scale_rewards=case.scale_rewards,
        epsilon=case.epsilon,
        epsilon_high=case.epsilon_high,
        beta=case.beta,
        use_bias_correction_kl=False,  # TRL's default multiplies the KL term by the ratio; relight's k3 does not
    )
    trainer = GRPOTrainer(
        model=sides.trl_model,
        reward_funcs=given_reward,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": prompt} for prompt in batch.prompts]),
        processing_class=sides.tokenizer,
        rollout_func=rollout,
    )
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # what its training loop sets: one micro-batch per step
    model.zero_grad(set_to_none=True)
    with moved_policy(model, case.beta):
        inputs = trainer._generate_and_score_completions([{"prompt": batch.prompts[i // 4]} for i in range(8)])
        if case.stale:  # as TRL's inputs hold them when the samples came from an earlier step's policy
            inputs["old_per_token_logps"] = _right_padded(olds, inputs["completion_ids"].shape[1])
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return float(loss.detach()), gradients


@pytest.fixture(autouse=True)
def _no_rollout_func_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL says rollout_func is experimental on each init


class moved_policy:
    """With a KL penalty, the policy moved away from its reference (both made before): the top layer's MLP
    output scaled by 1.1 for the block, so that the KL and its gradient are not zero."""

    def __init__(self, model: torch.nn.Module, beta: float) -> None:
        self.weight = model.get_submodule("model.layers.29.mlp.down_proj").weight if beta else None
        self.saved: torch.Tensor | None = None

    def __enter__(self) -> None:
        if self.weight is not None:
            self.saved = self.weight.detach().clone()
            with torch.no_grad():
                self.weight.mul_(1.1)

    def __exit__(self, *_: object) -> None:
        if self.weight is not None and self.saved is not None:
            with torch.no_grad():
                self.weight.copy_(self.saved)


def _right_padded(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([row + [0.0] * (width - len(row)) for row in rows])


def assert_same(
    relight: tuple[float, dict[str, torch.Tensor]], trl: tuple[float, dict[str, torch.Tensor]], *, rtol: float
) -> None:
    (loss, gradients), (trl_loss, trl_gradients) = relight, trl
    assert loss == pytest.approx(trl_loss, rel=rtol, abs=rtol * 1e-2)
    assert sorted(gradients) == sorted(trl_gradients)
    for name, gradient in gradients.items():
        expected = trl_gradients[name]
        error = float((gradient - expected).norm() / expected.norm())
        assert error < rtol, f"{name}: relative error {error:.2e}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_loss_and_its_gradients_are_trls(sides: Sides, case: Case, tmp_path: Path) -> None:
    olds = old_logprobs(sides, case)
    trl = trl_step(sides, case, olds, tmp_path)
    relight = relight_step(sides, case, olds, std_epsilon=1e-4)  # TRL's epsilon under the deviation
    assert trl[0] != 0.0
    assert_same(relight, trl, rtol=1e-4)
    if case == Case(stale=False):  # both sides' defaults: they differ only in the epsilon under the deviation
        assert_same(relight_step(sides, case, olds), trl, rtol=1e-3)
