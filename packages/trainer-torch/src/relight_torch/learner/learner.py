"""One optimizer step over any number of samples, in micro-batches that fit a token budget.

GRPO, REINFORCE++ and SFT differ only in the per-token loss; the learner owns everything else:
the optimizer, gradient accumulation that gives the same gradient however the batch is split
(each micro-batch's loss sum is divided by the whole batch's token count: a token mean), and
gradient clipping.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from relight_torch.learner.allocator import return_freed_tensors
from relight_torch.learner.optimizers import OptimizerName, make_optimizer, step_dropping_gradients
from relight_torch.learner.packing import (
    LOGPROB_CHUNK,
    PackedBatch,
    micro_batches,
    pack,
    response_logprobs,
    shared_prefix,
)

__all__ = ["Learner", "Sample", "TokenLoss"]


@dataclass(frozen=True, slots=True)
class Sample:
    """A prompt and the response to learn from, with what the objective needs to weigh it."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    advantage: float = 0.0
    old_logprobs: Sequence[float] | None = None
    """Per-token logprobs of the policy that sampled the response; ``None`` means the current policy's."""
    weights: Sequence[float] | None = None
    """Per-token weights of the policy-gradient term (truncated importance weights of a stale sample); None is 1."""
    behaviour_logprobs: Sequence[float] | None = None
    """Per-token logprobs of the engine that sampled the response, when the loss is to weigh each token by
    its importance weight against the policy's logprobs in the update's own forward pass (an update of one
    optimizer step, whose PPO anchor is the current policy: see :mod:`relight_torch.algorithms.offpolicy`)."""
    loss_weight: float = 1.0
    """What each of the response's tokens counts for in the summed loss (GRPO's ``loss_type="grpo"`` makes an
    episode's tokens count as much together as any other episode's); the policy-gradient loss reads it."""


TokenLoss = Callable[[torch.Tensor, PackedBatch, Sequence[Sample]], tuple[torch.Tensor, dict[str, float]]]
"""``(logprobs, batch, samples) -> (summed loss, statistics)`` over a micro-batch's response tokens.

A statistic is a sum over the micro-batch's tokens (the learner reports its mean over the update's
tokens), unless its name ends in ``_max`` or ``_min``: the learner then reports the largest or smallest
value any micro-batch gave."""


class Learner:
    """The policy's optimizer and its accumulation loop.

    Args:
        model: The policy, updated in place.
        pad_id: Token id used for padding (never scored).
        lr: AdamW's learning rate.
        token_budget: Most tokens (rows × padded width) in one forward/backward pass: the bound on
            the model's activations (about 1.3 MB per token for SmolLM2-135M in float32). Gradient
            accumulation makes the update the same whatever the budget; a smaller one uses less
            memory and runs a little slower.
        max_grad_norm: Gradients are clipped to this global norm.
        logprob_chunk: Response tokens whose vocabulary-wide logits exist at once (see
            :func:`relight_torch.learner.packing.token_logprobs`); None makes them for a whole micro-batch.
        recompute_activations: Keep only each layer's input in the forward pass and recompute the
            rest in the backward (Hugging Face's gradient checkpointing): activations fall from about
            1.3 MB to 0.1 MB per token for SmolLM2-135M, for about a third more compute. None turns it
            on for models of over 50M parameters, where activations, not weights, fill the memory.
        optimizer: ``"adamw"`` (``torch.optim.AdamW``, float32 moments) or ``"adamw8bit"``
            (bitsandbytes' block-wise 8-bit moments: 0.75 × the weights less memory, a close but
            not identical step; see :mod:`relight_torch.learner.optimizers`).
        parameters: The weights this learner steps and clips (by default all of ``model``'s): one
            policy's LoRA adapter among several on the same model (:mod:`relight_torch.vllm`), so that
            each policy has an optimizer of its own and a step of one leaves the others' weights alone.
        return_freed_memory: Give every freed block of 1 MiB or more back to the system
            (:mod:`relight_torch.learner.allocator`), so that an update's resident peak is its live
            tensors: 2.8 GB against 4.9 GB for a 32-sample update of SmolLM2-135M, for about a fifth
            more update CPU (the kernel maps and zeroes those pages again on every use). False keeps
            the C allocator's default, for updates that are faster where the memory is there. The
            setting is the process's: once one learner in it returns freed memory, all do.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        pad_id: int,
        lr: float = 3e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.99),
        token_budget: int = 4096,
        max_grad_norm: float = 1.0,
        logprob_chunk: int | None = LOGPROB_CHUNK,
        recompute_activations: bool | None = None,
        optimizer: OptimizerName = "adamw",
        parameters: Sequence[torch.nn.Parameter] | None = None,
        return_freed_memory: bool = True,
    ) -> None:
        self.model = model
        self.parameters = list(model.parameters() if parameters is None else parameters)
        self.pad_id = pad_id
        self.token_budget = token_budget
        self.max_grad_norm = max_grad_norm
        self.logprob_chunk = logprob_chunk
        if recompute_activations is None:
            recompute_activations = sum(p.numel() for p in model.parameters()) > 50_000_000
        self.recompute_activations = recompute_activations
        if return_freed_memory:
            return_freed_tensors()  # else the update's freed activations stay resident (learner.allocator)
        self.optimizer = make_optimizer(optimizer, self.parameters, lr=lr, weight_decay=weight_decay, betas=betas)
        self.step = 0

    def update(
        self, samples: Sequence[Sample], token_loss: TokenLoss, *, normalizer: float | None = None
    ) -> dict[str, float]:
        """Accumulate the token-mean loss over ``samples`` and take one optimizer step.

        ``normalizer`` divides the summed loss instead of the samples' token count: an algorithm
        that leaves out samples whose loss is zero anyway passes the count with them, so the step
        is the one it would have taken with them. Returns the loss, the other statistics
        ``token_loss`` reported (token means) and the gradient norm before clipping.
        """
        tokens = sum(len(sample.response_ids) for sample in samples)
        if tokens == 0:
            raise ValueError("an update needs at least one response token; every sample's response was empty")
        scale = normalizer or tokens
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {"loss": 0.0}
        share = not self.recompute_activations  # recomputed blocks run without a cache to share a start through
        lengths = self._lengths(samples, share=share)
        with self._recomputing():
            for indices in micro_batches(lengths, self.token_budget):
                chunk = [samples[i] for i in indices]
                batch = self.pack(chunk, share=share)
                loss, stats = token_loss(self.score(self.model, batch), batch, chunk)
                (loss / scale).backward()
                totals["loss"] += loss.item()
                for name, value in stats.items():
                    totals[name] = _combined(name, totals.get(name), value)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        step_dropping_gradients(self.optimizer)
        self.step += 1
        means = {name: value if _extreme(name) else value / tokens for name, value in totals.items()}
        return {**means, "loss": totals["loss"] / scale, "grad_norm": float(grad_norm)}

    def pack(self, samples: Sequence[Sample], *, share: bool = True) -> PackedBatch:
        """The samples as one batch; with ``share`` a start all their prompts share is computed once."""
        prompts, responses = [s.prompt_ids for s in samples], [s.response_ids for s in samples]
        return pack(prompts, responses, pad_id=self.pad_id, device=self.device, share=share)

    @staticmethod
    def _lengths(samples: Sequence[Sample], *, share: bool) -> list[int]:
        """Each sample's tokens for the budget: without the start every prompt shares, when it is computed once."""
        shared = shared_prefix([s.prompt_ids for s in samples]) if share else 0
        return [len(sample.prompt_ids) + len(sample.response_ids) - shared for sample in samples]

    @torch.no_grad()
    def logprobs(self, samples: Sequence[Sample], model: PreTrainedModel | None = None) -> list[list[float]]:
        """Each sample's response-token logprobs under ``model`` (the policy by default), batched by budget."""
        scorer = model or self.model
        result: list[list[float]] = [[] for _ in samples]
        for indices in micro_batches(self._lengths(samples, share=True), self.token_budget):
            chunk = [samples[i] for i in indices]
            scores = self.score(scorer, self.pack(chunk))
            for row, index in enumerate(indices):
                result[index] = scores[row, : len(samples[index].response_ids)].tolist()
        return result

    @contextmanager
    def _recomputing(self) -> Generator[None]:
        """Gradient checkpointing for the block, when asked for (Hugging Face applies it in training mode only)."""
        if not self.recompute_activations:
            yield
            return
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()
            self.model.gradient_checkpointing_disable()

    def score(self, model: PreTrainedModel, batch: PackedBatch) -> torch.Tensor:
        """The response tokens' logprobs under ``model``, logits made ``logprob_chunk`` tokens at a time."""
        return response_logprobs(model, batch, chunk_tokens=self.logprob_chunk)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])


def _extreme(name: str) -> bool:
    """Whether a loss statistic is a largest or smallest value rather than a sum (see :data:`TokenLoss`)."""
    return name.endswith(("_max", "_min"))


def _combined(name: str, total: float | None, value: float) -> float:
    """A statistic over the micro-batches so far, ``total``, with one more micro-batch's ``value``."""
    if total is None:
        return value
    if name.endswith("_max"):
        return max(total, value)
    if name.endswith("_min"):
        return min(total, value)
    return total + value
