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
from typing import Any, cast

import torch
from transformers import DynamicCache, PreTrainedModel

__all__ = [
    "LOGPROB_CHUNK",
    "PackedBatch",
    "forward_sharing",
    "left_pad",
    "micro_batches",
    "pack",
    "positions",
    "response_logprobs",
    "shared_prefix",
    "token_logprobs",
]


@dataclass(frozen=True, slots=True)
class PackedBatch:
    """Left-padded prompts followed by right-padded responses."""

    input_ids: torch.Tensor
    """``[batch, prompt_width + response_width]``"""
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    """``[batch, response_width]``: 1 where a response token is real."""
    shared: int = 0
    """Leading columns every row shares (``prefix, pads, rest of the prompt, response``): computed once."""

    @property
    def response_width(self) -> int:
        return self.response_mask.shape[1]


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding, so a padded row sees the positions it would see alone."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def left_pad(
    rows: Sequence[Sequence[int]], *, pad_id: int, device: torch.device | str = "cpu", shared: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of ``rows`` padded on the left to one width, as the engine feeds prompts.

    With ``shared``, the start that many leading tokens every row shares stays first and the pads
    go after it (``start, pads, rest``), so that :func:`forward_sharing` can compute the start once.
    """
    start = list(rows[0][:shared])
    rests = [row[shared:] for row in rows]
    width = max(len(rest) for rest in rests)
    ids = [start + [pad_id] * (width - len(rest)) + list(rest) for rest in rests]
    mask = [[1] * shared + [0] * (width - len(rest)) + [1] * len(rest) for rest in rests]
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
    share: bool = False,
) -> PackedBatch:
    """Lay out ``prompts[i] + responses[i]`` rows in one tensor (see the module docstring).

    With ``share``, a start that every prompt shares (an agent's system prompt and tool list) comes
    first and the rest of each prompt is left-padded after it, as the engine lays out a batch it
    samples (:mod:`relight_torch.engine.running_batch`); scoring then computes that start once.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"pack needs as many prompts as responses, at least one; got {len(prompts)}, {len(responses)}")
    shared = shared_prefix(prompts) if share else 0
    prompt_ids, prompt_mask = left_pad(prompts, pad_id=pad_id, device=device, shared=shared)
    width = max(1, max(len(r) for r in responses))
    response_ids = torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in responses], dtype=torch.long)
    response_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses], dtype=torch.long)
    return PackedBatch(
        input_ids=torch.cat([prompt_ids, response_ids.to(device)], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask.to(device)], dim=1),
        response_mask=response_mask.to(device),
        shared=shared,
    )


SHARED_MIN = 16
"""Shared leading tokens below which rows are computed whole (two passes would cost more than they save)."""


def shared_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence shares, leaving each at least one token of its own.

    0 for a single sequence or when fewer than :data:`SHARED_MIN` are shared.
    """
    if len(sequences) < 2:
        return 0
    shortest = min(len(s) for s in sequences)
    first = sequences[0]
    shared = max(0, shortest - 1)
    for index in range(shortest - 1):
        token = first[index]
        if any(s[index] != token for s in sequences):
            shared = index
            break
    return shared if shared >= SHARED_MIN else 0


LOGPROB_CHUNK = 512
"""Response tokens whose vocabulary-wide logits exist at once when scoring (see :func:`token_logprobs`)."""

_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields of models whose logits are more than the output layer's projection: scored whole."""


def response_logprobs(
    model: PreTrainedModel, batch: PackedBatch, *, chunk_tokens: int | None = LOGPROB_CHUNK
) -> torch.Tensor:
    """``[batch, response_width]`` log-probabilities of each response token (0 at padding).

    With ``chunk_tokens`` the model runs without its output layer, and the response tokens' logits
    are made ``chunk_tokens`` rows at a time (:func:`token_logprobs`), so memory does not grow with
    vocabulary × tokens; ``None`` makes the whole ``[batch, width, vocabulary]`` logits at once.
    """
    head = _output_layer(model) if chunk_tokens else None
    if head is None or chunk_tokens is None:
        return _whole_vocabulary_logprobs(model, batch)
    width = batch.response_width
    hidden = _forward(model.get_decoder(), batch).last_hidden_state[:, -width - 1 : -1]
    mask = batch.response_mask.bool()
    scores = token_logprobs(hidden[mask], batch.input_ids[:, -width:][mask], head, chunk_tokens=chunk_tokens)
    return torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device).masked_scatter(mask, scores)


def token_logprobs(
    hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Linear, *, chunk_tokens: int = LOGPROB_CHUNK
) -> torch.Tensor:
    """``log_softmax(head(hidden))[target]`` per row of ``hidden`` ``[tokens, hidden_size]``, in float32.

    Logits exist for at most ``chunk_tokens`` rows at a time, in the forward pass and in the
    backward, which makes each chunk's logits again and turns them into their gradient in place
    (:class:`_ChunkedLogprobs`): the peak is one chunk's logits and one output-layer gradient,
    however many tokens there are.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    scores = _ChunkedLogprobs.apply(hidden, head.weight, head.bias, targets, chunk_tokens)
    return cast(torch.Tensor, scores)


class _ChunkedLogprobs(torch.autograd.Function):
    """Token logprobs through the output layer without keeping vocabulary-wide tensors for the backward.

    Autograd's own graph (even checkpointed chunk by chunk) holds, per chunk, the logits, their
    softmax, the logits' gradient and a separate ``[vocabulary, hidden]`` gradient of the output
    layer, which an accumulation then adds up. Here the backward makes a chunk's logits again, turns
    them into ``d logprob / d logits = onehot(target) - softmax`` in place, and adds the chunk's
    share into one output-layer gradient (``addmm_``), as fused linear-cross-entropy kernels do.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk_tokens: int,
    ) -> torch.Tensor:
        scores = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_tokens):
            logits = _logits(hidden[start : start + chunk_tokens], weight, bias)
            wanted = targets[start : start + chunk_tokens].unsqueeze(-1)
            scores[start : start + chunk_tokens] = logits.gather(-1, wanted).squeeze(-1) - logits.logsumexp(-1)
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.chunk_tokens = chunk_tokens
        return scores

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_scores: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None]:
        hidden, weight, bias, targets = ctx.saved_tensors
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            rows = hidden[start : start + ctx.chunk_tokens]
            upstream = grad_scores[start : start + ctx.chunk_tokens].float().unsqueeze(-1)
            logits = _logits(rows, weight, bias)
            # d score / d logits = onehot(target) - softmax, times the score's gradient; made in place.
            logits.sub_(logits.logsumexp(-1, keepdim=True)).exp_().mul_(-upstream)
            logits.scatter_add_(-1, targets[start : start + ctx.chunk_tokens].unsqueeze(-1), upstream)
            grad_logits = logits.to(weight.dtype)
            if grad_hidden is not None:
                torch.mm(grad_logits, weight, out=grad_hidden[start : start + ctx.chunk_tokens])
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.T, rows)
            if grad_bias is not None:
                grad_bias.add_(grad_logits.sum(0))
        return grad_hidden, grad_weight, grad_bias, None, None


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(hidden, weight, bias).float()


def _output_layer(model: PreTrainedModel) -> torch.nn.Linear | None:
    """The output projection, when the logits are nothing more than it applied to the decoder's output."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or any(getattr(model.config, name, None) for name in _LOGIT_TRANSFORMS):
        return None
    return head


def _whole_vocabulary_logprobs(model: PreTrainedModel, batch: PackedBatch) -> torch.Tensor:
    width = batch.response_width
    logits = _forward(model, batch, logits_to_keep=width + 1).logits[:, :-1].float()
    targets = batch.input_ids[:, -width:]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logprobs * batch.response_mask


def _forward(model: torch.nn.Module, batch: PackedBatch, **options: Any) -> Any:
    """``model`` over the batch's rows, its shared start computed once (:func:`forward_sharing`)."""
    return forward_sharing(model, batch.input_ids, batch.attention_mask, shared=batch.shared, **options)


def forward_sharing(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    shared: int = 0,
    cache: DynamicCache | None = None,
    **options: Any,
) -> Any:
    """``model`` over left-padded rows whose first ``shared`` columns are one start (:func:`left_pad`).

    The start is run once, on the first row, and its keys and values repeated for every row.
    Gradients flow through the repeated keys and values back to that one computation, so a batch
    of an agent's calls costs about one system prompt plus each call's own tokens, in the backward
    pass as in the forward. ``cache`` (the engine's) receives the keys and values; without it none
    are kept beyond the call.
    """
    position_ids = positions(attention_mask)
    if shared:
        cache = cache if cache is not None else DynamicCache()
        start = {"logits_to_keep": 1} if "logits_to_keep" in options else {}
        model(input_ids=input_ids[:1, :shared], past_key_values=cache, use_cache=True, **start)
        cache.batch_repeat_interleave(input_ids.shape[0])
        input_ids, position_ids = input_ids[:, shared:], position_ids[:, shared:]
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=cache is not None,
        **options,
    )


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
