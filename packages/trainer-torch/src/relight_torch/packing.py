"""Prompt/response pairs as padded tensors, and the logprobs a model gives their response tokens.

The trainer lays sequences out the way the engine samples them: prompts left-padded so that every
response starts in the same column, responses right-padded after it, positions counted over real
tokens only. Scoring a batch then takes one forward pass that keeps only the response columns'
logits, and the numbers it gives are the ones the engine recorded while sampling (to float
rounding), which is what lets PPO ratios start at exactly 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

__all__ = ["PackedBatch", "left_pad", "micro_batches", "pack", "positions", "response_logprobs"]


@dataclass(frozen=True, slots=True)
class PackedBatch:
    """Left-padded prompts followed by right-padded responses."""

    input_ids: torch.Tensor
    """``[batch, prompt_width + response_width]``"""
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    """``[batch, response_width]``: 1 where a response token is real."""

    @property
    def response_width(self) -> int:
        return self.response_mask.shape[1]


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding, so a padded row sees the positions it would see alone."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def left_pad(
    rows: Sequence[Sequence[int]], *, pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of ``rows`` padded on the left to one width, as the engine feeds prompts."""
    width = max(len(row) for row in rows)
    ids = [[pad_id] * (width - len(row)) + list(row) for row in rows]
    mask = [[0] * (width - len(row)) + [1] * len(row) for row in rows]
    return (
        torch.tensor(ids, dtype=torch.long, device=device),
        torch.tensor(mask, dtype=torch.long, device=device),
    )


def pack(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    device: torch.device | str = "cpu",
) -> PackedBatch:
    """Lay out ``prompts[i] + responses[i]`` rows in one tensor (see the module docstring)."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"pack needs as many prompts as responses, at least one; got {len(prompts)}, {len(responses)}")
    prompt_ids, prompt_mask = left_pad(prompts, pad_id=pad_id, device=device)
    width = max(1, max(len(r) for r in responses))
    response_ids = torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in responses], dtype=torch.long)
    response_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses], dtype=torch.long)
    return PackedBatch(
        input_ids=torch.cat([prompt_ids, response_ids.to(device)], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask.to(device)], dim=1),
        response_mask=response_mask.to(device),
    )


def response_logprobs(model: PreTrainedModel, batch: PackedBatch) -> torch.Tensor:
    """``[batch, response_width]`` log-probabilities of each response token (0 at padding)."""
    width = batch.response_width
    output = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=positions(batch.attention_mask),
        logits_to_keep=width + 1,
        use_cache=False,
    )
    logits = output.logits[:, :-1].float()
    targets = batch.input_ids[:, -width:]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logprobs * batch.response_mask


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Indices grouped so that each group's size (rows × longest row) stays within ``token_budget``.

    Rows are taken longest first so that similar lengths share a group and little is padding; a row
    longer than the budget gets a group of its own. (:func:`pack` pads prompts and responses
    separately, so a packed group can be a little wider than its longest row.)
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, got {token_budget}")
    groups: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        width = max(widest, lengths[index])
        if current and width * (len(current) + 1) > token_budget:
            groups.append(current)
            current, width = [], lengths[index]
        current.append(index)
        widest = width
    if current:
        groups.append(current)
    return groups
