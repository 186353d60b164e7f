"""Transitions → verl batch, checked against tensors worked out by hand and against verl's own consumers."""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from relight.records import Transition
from relight_verl.batch import build_batch

PAD = 0


def transition(group: str, prompt: list[int], response: list[int], reward: float, **fields: object) -> Transition:
    values: dict[str, object] = {
        "rollout_id": f"ro-{group}-{reward}",
        "attempt_id": "at-1",
        "group_id": group,
        "step": 0,
        "prompt_token_ids": prompt,
        "response_token_ids": response,
        "response_logprobs": [-0.1 * (i + 1) for i in range(len(response))],
        "reward": reward,
    }
    values.update(fields)
    return Transition.model_validate(values)


THREE = [
    transition("g1", [5, 6, 7], [8, 9], 1.0, response_logprobs=[-0.1, -0.2]),
    transition("g1", [5], [10, 11, 12], 0.0, response_logprobs=[-0.3, -0.4, -0.5]),
    transition("g2", [1, 2], [3], 0.5, response_logprobs=[-0.6]),
]


def build(transitions: list[Transition], **options: object):
    settings: dict[str, object] = {"pad_token_id": PAD, "max_prompt_length": 8, "max_response_length": 8}
    settings.update(options)
    return build_batch(transitions, **settings)  # type: ignore[arg-type]


def test_rows_are_laid_out_as_verls_agent_loop_lays_them_out() -> None:
    batch, stats = build(THREE, multiple_of=4)
    assert batch is not None
    tensors = batch.batch
    assert tensors["prompts"].tolist() == [[5, 6, 7], [0, 0, 5], [0, 1, 2], [0, 0, 0]]
    assert tensors["responses"].tolist() == [[8, 9, 0], [10, 11, 12], [3, 0, 0], [0, 0, 0]]
    assert tensors["input_ids"].tolist() == [
        [5, 6, 7, 8, 9, 0],
        [0, 0, 5, 10, 11, 12],
        [0, 1, 2, 3, 0, 0],
        [0, 0, 0, 0, 0, 0],
    ]
    assert tensors["attention_mask"].tolist() == [
        [1, 1, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 1],
        [0, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 0, 0],  # the padding row: one prompt and one response token, attended
    ]
    assert tensors["position_ids"].tolist() == [
        [0, 1, 2, 3, 4, 4],
        [0, 0, 0, 1, 2, 3],
        [0, 0, 1, 2, 2, 2],
        [0, 0, 0, 1, 1, 1],
    ]
    assert tensors["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert tensors["token_level_scores"].tolist() == [[0, 1, 0], [0, 0, 0], [0.5, 0, 0], [0, 0, 0]]
    assert torch.equal(tensors["token_level_rewards"], tensors["token_level_scores"])
    expected_logprobs = torch.tensor([[-0.1, -0.2, 0], [-0.3, -0.4, -0.5], [-0.6, 0, 0], [0, 0, 0]])
    assert torch.equal(tensors["rollout_log_probs"], expected_logprobs)
    assert torch.equal(tensors["old_log_probs"], expected_logprobs)
    assert batch.non_tensor_batch["uid"].tolist() == ["g1", "g1", "g2", "pad-0"]
    assert batch.meta_info["global_token_num"] == [5, 4, 3, 2]
    assert (stats.trained, stats.padded, stats.rollouts, stats.dropped) == (3, 1, 3, 0)
    assert stats.metrics()["relight/padded"] == 1


def test_verls_unpadding_recovers_each_transitions_tokens() -> None:
    batch, _ = build(THREE, multiple_of=4)
    assert batch is not None
    unpadded = left_right_2_no_padding(batch.to_tensordict())
    sequences = [row.tolist() for row in unpadded["input_ids"].unbind()]
    assert sequences == [[5, 6, 7, 8, 9], [5, 10, 11, 12], [1, 2, 3], [0, 0]]
    # A per-token model output maps back onto the response columns the way verl's workers do it.
    per_token = torch.nested.nested_tensor_from_jagged(
        unpadded["input_ids"].values().float(), offsets=unpadded["input_ids"].offsets()
    )
    back = no_padding_2_padding(per_token, unpadded)
    assert back.tolist()[:3] == [[7, 8, 0], [5, 10, 11], [2, 0, 0]]


def test_padding_rows_add_nothing_to_verls_loss() -> None:
    padded, _ = build(THREE, multiple_of=8)
    exact, _ = build(THREE)
    assert padded is not None
    assert exact is not None
    assert len(padded) == 8
    assert len(exact) == 3
    for mode in ("token-mean", "seq-mean-token-mean"):
        losses = []
        for batch in (padded, exact):
            loss_matrix = torch.arange(batch.batch["response_mask"].numel(), dtype=torch.float32)
            loss_matrix = loss_matrix.reshape(batch.batch["response_mask"].shape)
            losses.append(agg_loss(loss_matrix, batch.batch["response_mask"], mode).item())
        assert losses[0] == pytest.approx(losses[1])
    assert padded.batch["response_mask"][3:].sum() == 0


def test_verls_data_metrics_read_the_batch() -> None:
    batch, _ = build(THREE)
    assert batch is not None
    batch.batch["advantages"] = torch.zeros_like(batch.batch["token_level_scores"])
    batch.batch["returns"] = torch.zeros_like(batch.batch["token_level_scores"])
    metrics = compute_data_metrics(batch, use_critic=False)
    assert metrics["critic/score/mean"] == pytest.approx(0.5)
    assert metrics["response_length/mean"] == pytest.approx(2.0)
    assert metrics["prompt_length/max"] == pytest.approx(3.0)


def test_too_long_and_empty_transitions_are_dropped_and_counted() -> None:
    long_prompt = transition("g1", list(range(1, 10)), [4], 1.0)
    long_response = transition("g1", [1], list(range(1, 10)), 1.0)
    empty = transition("g1", [1], [], 1.0)
    batch, stats = build([*THREE, long_prompt, long_response, empty])
    assert batch is not None
    assert len(batch) == 3
    assert (stats.dropped_too_long, stats.dropped_empty, stats.transitions) == (2, 1, 6)


def test_missing_logprobs_leave_old_logprobs_to_the_actor() -> None:
    retokenized = transition("g2", [4], [5], 0.0, response_logprobs=None, retokenized=True)
    batch, stats = build([*THREE, retokenized])
    assert batch is not None
    assert "rollout_log_probs" not in batch.batch
    assert "old_log_probs" not in batch.batch
    assert (stats.missing_logprobs, stats.retokenized) == (1, 1)


def test_nothing_trainable_gives_no_batch() -> None:
    batch, stats = build([transition("g1", [1], [], 1.0)], multiple_of=4)
    assert batch is None
    assert (stats.trained, stats.padded, stats.dropped_empty) == (0, 0, 1)


def test_multiple_of_must_be_positive() -> None:
    with pytest.raises(ValueError, match="multiple_of"):
        build(THREE, multiple_of=0)
