"""Helpers for tests: a real pretrained model as a fixture, and hand-made groups of answers.

Import the fixture into a ``conftest.py``::

    from relight_torch.testing import smollm2_path  # noqa: F401

:class:`TokenizerReference` is what :mod:`relight.testing.compat` holds spans to for a model
served by relight-torch (prompts rendered as the engine renders them).

``smollm2_path`` is session-scoped and the folder behind it is cached across runs
(:func:`relight_torch.models.smollm2`); where the model cannot be had (no registry, no ``gguf``
package) the tests that use it are skipped with the reason. :func:`answers` makes a GRPO group
whose logprobs are those the engine's policy gives it now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from relight.engine import GenerationRequest
from relight.models import Transition
from relight_torch.chat import render
from relight_torch.engine import TorchEngine
from relight_torch.learner import Learner, Sample
from relight_torch.models import ModelUnavailable, smollm2

__all__ = ["QUESTION", "TokenizerReference", "answers", "smollm2_path"]

QUESTION = [{"role": "user", "content": "What is 12 * 7?"}]


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Hugging Face folder, built once and cached outside the repository."""
    try:
        return smollm2()
    except ModelUnavailable as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not available here: {exc}")


def answers(engine: TorchEngine, texts: list[str], rewards: list[float]) -> list[Transition]:
    """One group: :data:`QUESTION` answered with each text, scored by hand, logprobs as the engine would record
    them now (under policy version 0)."""
    prompt = engine.prompt_ids(GenerationRequest(model="m", messages=QUESTION))
    responses = [[*engine.tokenizer.encode(text), engine.tokenizer.eos_token_id] for text in texts]
    logprobs = Learner(engine.model, pad_id=engine.pad_id).logprobs([Sample(prompt, r) for r in responses])
    return [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id="task",
            step=0,
            prompt_token_ids=prompt,
            response_token_ids=response,
            response_logprobs=logprobs[i],
            reward=reward,
            policy_version=0,
        )
        for i, (response, reward) in enumerate(zip(responses, rewards, strict=True))
    ]


class TokenizerReference:
    """A :class:`relight.testing.compat.Reference` from a tokenizer: prompts as relight-torch renders them,
    or (``engine_rendering=False``) as the bare chat template does, which is what other servers use."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, engine_rendering: bool = True) -> None:
        self.tokenizer = tokenizer
        self.engine_rendering = engine_rendering
        self.end_of_turn = int(tokenizer.eos_token_id)  # type: ignore[arg-type]

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        if self.engine_rendering:
            return render(self.tokenizer, messages, tools=tools, add_generation_prompt=True)
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        return list(self.tokenizer.encode(str(text), add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
