"""Real verl updates on one GPU: vLLM serves a tiny model, relight transitions train it.

Needs CUDA and ``pip install 'relight-verl[gpu]'``; skipped cleanly otherwise (CI has no GPU, so no run of it is
recorded yet: the README's status line).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from rich.console import Console

import relight
from relight.records import Transition
from relight_verl import VerlAlgorithm

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("vllm", reason="needs verl's GPU extras: pip install 'relight-verl[gpu]'")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PROMPTS = ["What is 2 + 3?", "def add(a, b):"]


@pytest.fixture
def algorithm(tiny_model_with_weights: Path, tmp_path: Path) -> Iterator[VerlAlgorithm]:
    """The tiny model on one GPU: mini-batches of 4 transitions, short sequences, a large learning rate."""
    algorithm = VerlAlgorithm(
        model=str(tiny_model_with_weights),
        served_model_name="tiny",
        mini_batch_size=4,
        micro_batch_size_per_gpu=2,
        max_prompt_length=128,
        max_response_length=16,
        gpu_memory_utilization=0.3,
        lr=1e-3,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        save_every=2,
        resume="disable",
        loggers=(),
        overrides=("actor_rollout_ref.rollout.enforce_eager=true",),
    )
    try:
        yield algorithm
    finally:
        algorithm.close()  # ends the Ray job, so the next test gets the GPU


async def call(client: httpx.AsyncClient, base_url: str, prompt: str, *, temperature: float) -> dict[str, Any]:
    """One chat call in the vLLM dialect the gateway speaks: token ids and logprobs requested."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        "temperature": temperature,
        "logprobs": True,
        "return_token_ids": True,
    }
    response = await client.post(f"{base_url}/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def as_transition(reply: dict[str, Any], group: str, index: int) -> Transition:
    choice = reply["choices"][0]
    response_ids = choice["token_ids"]
    return Transition(
        rollout_id=f"ro-{group}-{index}",
        attempt_id="at-1",
        group_id=group,
        step=0,
        prompt_token_ids=reply["prompt_token_ids"],
        response_token_ids=response_ids,
        response_logprobs=[entry["logprob"] for entry in choice["logprobs"]["content"]],
        reward=len(set(response_ids)) / max(len(response_ids), 1),  # any reward that varies within a group
    )


async def test_updates_train_save_and_serve_the_new_policy(algorithm: VerlAlgorithm, tmp_path: Path) -> None:
    (base_url,) = algorithm.upstreams()
    async with httpx.AsyncClient() as client:
        before = await call(client, base_url, PROMPTS[0], temperature=0)
        for step in range(1, 4):
            transitions = []
            for group, prompt in enumerate(PROMPTS):
                for index in range(3):
                    reply = await call(client, base_url, prompt, temperature=1.0)
                    transitions.append(as_transition(reply, f"g{group}", index))
            metrics = await algorithm.update(transitions)
            assert algorithm.policy_version == step
            assert metrics["relight/trained"] + metrics["relight/dropped"] == 6  # an empty reply is dropped
            assert (metrics["relight/trained"] + metrics["relight/padded"]) % 4 == 0  # whole mini-batches
            for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "reward/train_mean"):
                assert key in metrics
        after = await call(client, base_url, PROMPTS[0], temperature=0)

    first = before["choices"][0]["logprobs"]["content"][0]["logprob"]
    assert after["choices"][0]["logprobs"]["content"][0]["logprob"] != pytest.approx(first, abs=1e-4)
    assert (tmp_path / "checkpoints" / "global_step_2" / "actor").is_dir()
    assert (tmp_path / "checkpoints" / "metrics.jsonl").read_text().count("\n") == 3

    algorithm.load(tmp_path / "checkpoints")
    assert algorithm.policy_version == 2


async def test_trainer_fit_drives_an_unchanged_agent_into_verl(algorithm: VerlAlgorithm) -> None:
    @relight.rollout
    async def agent(task: str, llm: relight.LLM) -> float:
        async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
            reply = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task}], max_tokens=16
            )
        return len(reply.choices[0].message.content or "") / 64

    trainer = relight.Trainer(
        algorithm=algorithm, batch_size=2, n_samples=2, val_every=1, console=Console(file=io.StringIO())
    )
    history = await trainer.afit(agent, PROMPTS * 2, PROMPTS)

    steps = [entry for entry in history if "actor/pg_loss" in entry]
    assert [entry["policy_version"] for entry in steps] == [1, 2]
    assert all(entry["relight/trained"] + entry["relight/dropped"] == 4 for entry in steps)
    assert any("val_reward_mean" in entry for entry in history)
