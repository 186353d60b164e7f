"""A seeded ``fit`` of relight-torch's tiny model, run as its own process by the resume tests and benchmark.

    python tests/resume_fit.py RUN_DIR [--batch-size N] [--runners N]

A runner process, the run folder's SQLite store, one sampled call per rollout. Each call is seeded
by its rollout's group and sample (the rollout id after the run id), so a rollout samples the same
tokens whichever run, process or moment it runs in: an interrupted and an uninterrupted run can be
compared exactly. Two environment variables make the first run stop where a test kills it:

* ``RESUME_HOLD_ROLLOUT=step2-task1-s1``: that rollout prints ``HOLDING <id>`` and never ends;
* ``RESUME_HOLD_UPDATE=3``: the update of step 3 prints ``UPDATING 3`` and never ends.

The last line printed is a JSON object with the run's history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import zlib
from collections.abc import Sequence
from typing import Any

import httpx

import relight
from relight.records import Transition
from relight_torch.algorithms.grpo import GRPO
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_model, tiny_tokenizer

TASKS = [{"text": f"count to {n}"} for n in range(6)]


def _rollout_id(llm: relight.LLM) -> str:
    """``…/rollouts/<rollout id>/attempts/<attempt id>/v1`` → the rollout id."""
    return llm.base_url.split("/rollouts/", 1)[1].split("/", 1)[0]


@relight.rollout
async def seeded_agent(task: dict[str, Any], llm: relight.LLM) -> float:
    """One sampled call; a reward in [0, 1) drawn from the answer's text."""
    rollout = _rollout_id(llm)
    name = rollout.split("-", 1)[1]  # without the run id: the same in every run
    if os.environ.get("RESUME_HOLD_ROLLOUT") == name:
        print(f"HOLDING {name}", flush=True)
        await asyncio.Event().wait()
    body = {
        "model": llm.model,
        "messages": [{"role": "user", "content": task["text"]}],
        "temperature": 1.0,
        "max_tokens": 6,
        "seed": zlib.crc32(name.encode()),
    }
    async with httpx.AsyncClient(timeout=120) as client:
        reply = await client.post(f"{llm.base_url}/chat/completions", json=body, headers={"authorization": "Bearer x"})
        reply.raise_for_status()
    content = reply.json()["choices"][0]["message"]["content"] or ""
    return zlib.crc32(content.encode()) % 100 / 100  # differs between any two answers: every group has signal


class HeldGRPO(GRPO):
    """GRPO whose update of step ``RESUME_HOLD_UPDATE`` never ends (a process killed mid-update)."""

    def learn(self, transitions: Sequence[Transition]) -> dict[str, float]:
        hold = os.environ.get("RESUME_HOLD_UPDATE")
        if hold and any(t.group_id.startswith(f"step{hold}-") for t in transitions):
            print(f"UPDATING {hold}", flush=True)
            threading.Event().wait()
        return super().learn(transitions)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--runners", type=int, default=1)
    parser.add_argument("--max-staleness", type=int, default=None)
    args = parser.parse_args(argv)
    tokenizer = tiny_tokenizer()
    # No prefix cache: a prompt's logprobs then never depend on what the engine served before it, so
    # an interrupted run and an uninterrupted one record the very same numbers (with it, they differ
    # by float rounding, about 1e-7, and so do the loss, ratio, gradient norm and weights after them).
    engine = TorchEngine(
        tiny_model(tokenizer, seed=0), tokenizer, seed=0, default_max_tokens=512, prefix_cache_tokens=0
    )
    algorithm = HeldGRPO(engine, lr=1e-2, seed=0)
    trainer = relight.Trainer(
        algorithm,
        run_dir=args.run_dir,
        batch_size=args.batch_size,
        n_samples=2,
        n_runners=args.runners,
        runner_process=True,
        concurrency=1,
        lease_seconds=3.0,
        max_staleness=args.max_staleness,
    )
    try:
        history = trainer.fit(seeded_agent, TASKS)
    finally:
        engine.close()
    print(json.dumps({"history": history}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
