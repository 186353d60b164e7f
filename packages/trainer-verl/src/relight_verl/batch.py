"""Transitions become a verl batch: the tensors verl's agent loop would have produced for them.

One transition (one LLM call) is one row, laid out as verl's ``AgentLoopWorker`` lays out a
sample, so verl's workers, estimators and metrics take it unchanged:

* ``prompts`` left-padded and ``responses`` right-padded with the tokenizer's pad id, ``input_ids``
  their concatenation, ``attention_mask`` 1 on real tokens, ``position_ids`` from verl's
  ``compute_position_id_with_mask``;
* ``response_mask`` 1 on the tokens the policy sampled (every response token: a call's response
  holds no tool output);
* ``rollout_log_probs`` and ``old_log_probs``: the logprobs vLLM sampled with (only when every
  transition has them; otherwise the actor recomputes them);
* ``token_level_scores`` and ``token_level_rewards``: the transition's reward on its last response
  token, zero elsewhere;
* ``uid`` (non-tensor): the transition's group id, which verl's GRPO and RLOO group by.

Nothing is dropped silently: empty responses and sequences longer than the configured limits are
left out and counted, and the batch is padded to a multiple of the mini-batch with rows that carry
no loss, also counted. (Whether failed rollouts yield transitions, and with what reward, is the
core's :class:`relight.TransitionBuilder`'s call; the trainer counts them.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from relight.records import Transition

__all__ = ["BatchStats", "build_batch"]


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What happened to the transitions of one update, for the metrics."""

    transitions: int
    """Transitions received."""
    rollouts: int
    """Distinct rollouts among the trained transitions."""
    trained: int
    """Rows that carry a real transition."""
    padded: int
    """Rows added (with no loss) to reach a multiple of the mini-batch."""
    dropped_too_long: int
    dropped_empty: int
    retokenized: int
    """Trained transitions whose token ids the gateway had to retokenize."""
    missing_logprobs: int
    """Trained transitions without sampling logprobs (their batch recomputes old logprobs)."""
    prompt_tokens: int
    response_tokens: int

    @property
    def dropped(self) -> int:
        return self.dropped_too_long + self.dropped_empty

    def metrics(self) -> dict[str, float]:
        return {
            "relight/transitions": self.transitions,
            "relight/rollouts": self.rollouts,
            "relight/trained": self.trained,
            "relight/padded": self.padded,
            "relight/dropped": self.dropped,
            "relight/dropped_too_long": self.dropped_too_long,
            "relight/dropped_empty": self.dropped_empty,
            "relight/retokenized": self.retokenized,
            "relight/missing_logprobs": self.missing_logprobs,
        }


def build_batch(
    transitions: Sequence[Transition],
    *,
    pad_token_id: int,
    max_prompt_length: int,
    max_response_length: int,
    multiple_of: int = 1,
) -> tuple[DataProto | None, BatchStats]:
    """Lay out ``transitions`` as a verl batch of a multiple of ``multiple_of`` rows.

    Returns None for the batch when no transition is trainable; the stats say why.
    """
    if multiple_of < 1:
        raise ValueError(f"multiple_of must be >= 1, got {multiple_of}")
    kept: list[Transition] = []
    dropped_too_long = dropped_empty = 0
    for transition in transitions:
        if not transition.response_token_ids:
            dropped_empty += 1
        elif (
            len(transition.prompt_token_ids) > max_prompt_length
            or len(transition.response_token_ids) > max_response_length
        ):
            dropped_too_long += 1
        else:
            kept.append(transition)

    padded = -len(kept) % multiple_of if kept else 0
    stats = BatchStats(
        transitions=len(transitions),
        rollouts=len({t.rollout_id for t in kept}),
        trained=len(kept),
        padded=padded,
        dropped_too_long=dropped_too_long,
        dropped_empty=dropped_empty,
        retokenized=sum(t.retokenized for t in kept),
        missing_logprobs=sum(t.response_logprobs is None for t in kept),
        prompt_tokens=sum(len(t.prompt_token_ids) for t in kept),
        response_tokens=sum(len(t.response_token_ids) for t in kept),
    )
    if not kept:
        return None, stats
    return _layout(kept, padded, pad_token_id, with_logprobs=stats.missing_logprobs == 0), stats


def _layout(kept: list[Transition], padded: int, pad_token_id: int, *, with_logprobs: bool) -> DataProto:
    rows = len(kept) + padded
    prompt_width = max(len(t.prompt_token_ids) for t in kept)
    response_width = max(len(t.response_token_ids) for t in kept)
    prompts = torch.full((rows, prompt_width), pad_token_id, dtype=torch.int64)
    responses = torch.full((rows, response_width), pad_token_id, dtype=torch.int64)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.int64)
    response_attention = torch.zeros((rows, response_width), dtype=torch.int64)
    scores = torch.zeros((rows, response_width), dtype=torch.float32)
    logprobs = torch.zeros((rows, response_width), dtype=torch.float32)
    for row, transition in enumerate(kept):
        prompt, response = transition.prompt_token_ids, transition.response_token_ids
        prompts[row, prompt_width - len(prompt) :] = torch.tensor(prompt)
        prompt_mask[row, prompt_width - len(prompt) :] = 1
        responses[row, : len(response)] = torch.tensor(response)
        response_attention[row, : len(response)] = 1
        scores[row, len(response) - 1] = transition.reward
        if transition.response_logprobs is not None:
            logprobs[row, : len(response)] = torch.tensor(transition.response_logprobs)
    # Padding rows: one pad token of prompt and one of response, attended but never in the loss.
    prompt_mask[len(kept) :, -1] = 1
    response_attention[len(kept) :, 0] = 1
    response_mask = response_attention.clone()
    response_mask[len(kept) :] = 0

    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
    }
    if with_logprobs:
        tensors["rollout_log_probs"] = logprobs
        tensors["old_log_probs"] = logprobs.clone()
    pads = [f"pad-{index}" for index in range(padded)]
    non_tensors = {
        "uid": np.array([t.group_id for t in kept] + pads, dtype=object),
        "rollout_id": np.array([t.rollout_id for t in kept] + pads, dtype=object),
    }
    meta_info = {"global_token_num": attention_mask.sum(dim=-1).tolist(), "padded": padded}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)
