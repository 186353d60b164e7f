"""Pushing a new policy into vLLM, and how far vLLM's sampling logprobs are from the learner's.

For ``--modes lora full``: relight starts a vLLM server for SmolLM2-135M-Instruct (relight_torch.vllm,
bf16, ``--enforce-eager``) with the learner's float32 model beside it, then

- **mismatch**: plays ``--calls`` calc-agent first calls (the calculator tool, temperature 1, up to 48
  tokens) on vLLM, recording its token ids and logprobs as the gateway does, and scores the same tokens
  with the learner's forward pass (same weights). Reported: max and mean |Δ logprob| per token, the
  importance ratio π_learner/π_vLLM (min, max, standard deviation) and the share of tokens a truncation
  cap of 2 clips: what relight-torch's truncated importance sampling corrects on every sample.
- **push**: changes the trainable weights (LoRA adapters, or every weight) a little, ``--pushes`` times,
  and times :meth:`VLLMPolicy.push` from the update's end until the new version answers a call.

    python benchmarks/vllm_push.py               # a table
    python benchmarks/vllm_push.py --json        # one JSON object per line
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import torch
from rich.console import Console
from rich.table import Table

from relight_torch.learner.learner import Learner, Sample
from relight_torch.models import smollm2
from relight_torch.vllm import LoraOptions, VLLMPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_calls import TOOLS, conversations  # the same calc-agent calls


def sampled(policy: VLLMPolicy, calls: int) -> list[Sample]:
    """vLLM's samples of the calc agent's first calls, with the ids and logprobs it reports."""
    samples: list[Sample] = []
    with httpx.Client(timeout=600) as client:
        for seed, chain in enumerate(conversations(calls)):
            body = {
                "model": policy.served_name, "messages": chain[0], "tools": TOOLS, "tool_choice": "none",
                "max_tokens": 48, "temperature": 1.0, "seed": seed, "logprobs": True, "return_token_ids": True,
            }  # fmt: skip
            answer = client.post(f"{policy.upstream.name}/chat/completions", json=body).json()
            choice = answer["choices"][0]
            logprobs = [token["logprob"] for token in choice["logprobs"]["content"]]
            samples.append(Sample(answer["prompt_token_ids"], choice["token_ids"], 0.0, logprobs))
    return samples


def mismatch(policy: VLLMPolicy, calls: int) -> dict[str, float]:
    samples = sampled(policy, calls)
    learner = Learner(policy.model, pad_id=policy.pad_id)
    deltas: list[float] = []
    for sample, mine in zip(samples, learner.logprobs(samples), strict=True):
        assert sample.old_logprobs is not None
        deltas += [now - then for now, then in zip(mine, sample.old_logprobs, strict=True)]
    ratios = [float(torch.tensor(d).exp()) for d in deltas]
    return {
        "tokens": len(deltas),
        "delta_abs_max": round(max(abs(d) for d in deltas), 4),
        "delta_abs_mean": round(statistics.fmean(abs(d) for d in deltas), 4),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "ratio_std": round(statistics.pstdev(ratios), 4),
        "clipped_at_2": round(sum(r > 2 for r in ratios) / len(ratios), 4),
    }


def pushes(policy: VLLMPolicy, count: int) -> list[float]:
    """Seconds from the update's end to the first answer of the new version."""
    seconds: list[float] = []
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    for _ in range(count):
        with torch.no_grad():
            for parameter in trainable:
                parameter.add_(torch.randn_like(parameter) * 1e-3)
        began = time.perf_counter()
        policy.push()
        answer = httpx.post(
            f"{policy.upstream.name}/chat/completions",
            json={"model": policy.served_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
            timeout=600,
        )
        answer.raise_for_status()
        seconds.append(time.perf_counter() - began)
    return seconds


def measure(mode: str, calls: int, count: int) -> dict[str, Any]:
    began = time.perf_counter()
    policy = VLLMPolicy(smollm2(), lora=LoraOptions() if mode == "lora" else None)
    try:
        policy.start()
        start_s = time.perf_counter() - began
        gap = mismatch(policy, calls)
        served = pushes(policy, count)
    finally:
        policy.close()
    return {
        "benchmark": "vllm_push",
        "mode": mode,
        "server_start_s": round(start_s, 1),
        "push_s_mean": round(statistics.fmean(served), 2),
        "push_s_max": round(max(served), 2),
        "pushes": count,
        **gap,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--pushes", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    results = [measure(mode, args.calls, args.pushes) for mode in args.modes]
    if args.json:
        for result in results:
            print(json.dumps(result))
        return
    table = Table(title="vllm_push: weight push and bf16-vs-fp32 logprob mismatch, SmolLM2-135M")
    columns = [key for key in results[0] if key != "benchmark"]
    for column in columns:
        table.add_column(column)
    for result in results:
        table.add_row(*(str(result[column]) for column in columns))
    Console().print(table)


if __name__ == "__main__":
    main()
