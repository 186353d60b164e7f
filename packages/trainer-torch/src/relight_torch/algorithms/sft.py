"""Supervised fine-tuning, masked to what the assistant said: a warm start, or an algorithm of its own.

Demonstrations come as conversations (OpenAI messages, optionally with ``tools``; a JSONL file
holds one per line) or as transitions. A conversation is cut into one sample per assistant turn,
rendered exactly as the engine would prompt the model (:func:`relight_torch.engine.chat.assistant_turns`),
so the loss covers only tokens the model itself would have to produce. :meth:`SFT.fit` trains on
a fixed set; as a :class:`relight.Algorithm`, :meth:`SFT.update` learns from each batch of
transitions (those with ``reward >= min_reward``: rejection-sampling fine-tuning).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from relight.records import Transition
from relight_torch.algorithms.objectives import negative_log_likelihood
from relight_torch.algorithms.policy_algorithm import PolicyAlgorithm
from relight_torch.engine.chat import assistant_turns
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Sample

__all__ = ["SFT", "conversation_samples", "read_conversations", "transition_samples"]

Conversation = Mapping[str, Any]
"""``{"messages": [...], "tools": [...]}`` (``tools`` optional)."""


def read_conversations(path: str | Path) -> list[Conversation]:
    """Conversations from a JSONL file: each line ``{"messages": [...], "tools": [...]}`` or a bare message list.

    Raises:
        ValueError: a line is not JSON or has no messages; the message names the line.
    """
    conversations: list[Conversation] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON: {error}") from None
        conversation = {"messages": record} if isinstance(record, list) else record
        if not isinstance(conversation, dict) or not isinstance(conversation.get("messages"), list):
            raise ValueError(f"{path}:{number}: expected a list of messages or an object with 'messages'")
        conversations.append(conversation)
    return conversations


def conversation_samples(tokenizer: PreTrainedTokenizerBase, conversations: Iterable[Conversation]) -> list[Sample]:
    """One sample per assistant turn: the conversation so far as the prompt, the turn as the response."""
    return [
        Sample(prompt, response)
        for conversation in conversations
        for prompt, response in assistant_turns(tokenizer, conversation["messages"], tools=conversation.get("tools"))
    ]


def transition_samples(transitions: Iterable[Transition], *, min_reward: float | None = None) -> list[Sample]:
    """Transitions to imitate: those with a response and, when ``min_reward`` is set, a reward at least that."""
    return [
        Sample(t.prompt_token_ids, t.response_token_ids)
        for t in transitions
        if t.response_token_ids and (min_reward is None or t.reward >= min_reward)
    ]


class SFT(PolicyAlgorithm):
    """Fine-tune ``engine``'s model on demonstrations, with a token-mean negative log-likelihood.

    Args:
        engine: Serves the policy that is trained in place.
        lr: AdamW's peak learning rate.
        min_reward: As an algorithm, learn only from transitions with at least this reward.
        seed: Seeds the sampling of :meth:`fit`'s batches.
    """

    def __init__(
        self,
        engine: TorchEngine,
        *,
        lr: float = 1e-3,
        min_reward: float | None = None,
        seed: int = 0,
        **learner_options: Any,
    ) -> None:
        super().__init__(engine, seed=seed, lr=lr, **learner_options)
        self.min_reward = min_reward

    def fit(
        self,
        samples: Sequence[Sample],
        *,
        steps: int,
        batch_size: int = 32,
        warmup: int = 20,
        on_step: Callable[[int, float], None] | None = None,
    ) -> list[float]:
        """Train for ``steps`` batches drawn from ``samples``; the learning rate warms up, then decays to 0.

        Returns the loss of each step. ``on_step(step, loss)`` runs after each one (progress bars).
        """
        if not samples:
            raise ValueError("SFT.fit needs at least one sample")
        peak = [group["lr"] for group in self.learner.optimizer.param_groups]
        schedule = torch.optim.lr_scheduler.LambdaLR(
            self.learner.optimizer, lambda step: min(1.0, (step + 1) / warmup) * max(0.0, 1 - step / steps)
        )
        losses: list[float] = []
        try:
            with self.changing_weights():
                for step in range(steps):
                    batch = self.rng.choices(samples, k=batch_size)
                    losses.append(self.learner.update(batch, negative_log_likelihood)["loss"])
                    schedule.step()
                    if on_step is not None:
                        on_step(step, losses[-1])
        finally:
            for group, lr in zip(self.learner.optimizer.param_groups, peak, strict=True):
                group["lr"] = lr
        return losses

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        """One step on the batch's transitions that reach ``min_reward`` (none: nothing changes)."""
        samples = transition_samples(transitions, min_reward=self.min_reward)
        if not samples:
            return {"sft_samples": 0.0}
        metrics = await self.off_the_loop(self._step, samples)
        return {**metrics, "sft_samples": float(len(samples))}

    def _step(self, samples: Sequence[Sample]) -> dict[str, float]:
        with self.changing_weights():
            return self.learner.update(samples, negative_log_likelihood)

    def loss(self, samples: Sequence[Sample]) -> float:
        """The token-mean negative log-likelihood of ``samples`` under the current weights."""
        logprobs = self.learner.logprobs(samples)
        tokens = sum(len(row) for row in logprobs)
        return -sum(sum(row) for row in logprobs) / tokens
