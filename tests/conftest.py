"""Two real run folders of the tiny model, made once per session: what ``relight compare``, the dashboard's
compare page, ``relight serve`` and ``relight export-model`` are tested on.

The runs train relight-torch's tiny model (built on the spot, no downloads) with GRPO through the whole of
relight, on a one-call agent written with the ``openai`` client whose reward is graded so that groups
differ and every update changes the weights. They differ in their learning rate and their length.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from pydantic import JsonValue
from rich.console import Console

import relight
from relight_torch.algorithms.grpo import GRPO
from relight_torch.demo.calculator import answer_reward
from relight_torch.models.tiny import tiny_engine


@relight.rollout
async def multiplier(task: dict[str, Any], llm: relight.LLM) -> float:
    """One call; the right product earns 1, and the answer's text a little more, so samples of a task differ."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=12, temperature=1.0
        )
    answer = reply.choices[0].message.content or ""
    return answer_reward(answer, task["answer"]) + zlib.crc32(answer.encode()) % 5 / 8


def products(count: int, start: int) -> list[JsonValue]:
    return [{"question": f"What is {a} * {a + 3}?", "answer": a * (a + 3)} for a in range(start, start + count)]


@dataclass(frozen=True)
class TwoRuns:
    """Two finished run folders of the tiny model, alike but for the learning rate and the number of steps."""

    slow: Path
    """lr 1e-3, two steps."""
    fast: Path
    """lr 1e-2, three steps."""
    slow_history: list[dict[str, float]]
    fast_history: list[dict[str, float]]


def fit_run_folder(run_dir: Path, *, lr: float, steps: int) -> list[dict[str, float]]:
    """A whole ``fit`` into ``run_dir``: ``steps`` steps of two tasks, validated before, between and after."""
    engine = tiny_engine(seed=0)
    try:
        trainer = relight.Trainer(
            GRPO(engine, lr=lr),
            batch_size=2,
            n_samples=2,
            concurrency=4,
            val_every=1,
            run_dir=run_dir,
            console=Console(file=io.StringIO()),
        )
        return trainer.fit(multiplier, products(2 * steps, 41), products(1, 70))
    finally:
        engine.close()


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    root = tmp_path_factory.mktemp("compared")
    slow = fit_run_folder(root / "slow", lr=1e-3, steps=2)
    fast = fit_run_folder(root / "fast", lr=1e-2, steps=3)
    return TwoRuns(root / "slow", root / "fast", slow, fast)
