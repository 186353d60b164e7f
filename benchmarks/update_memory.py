"""Peak memory of one GRPO update on a real vocabulary: SmolLM2-135M (49k tokens), 16 transitions, 4,002 tokens.

Each configuration runs in a fresh process: the model is loaded, the process's peak resident set
(``VmHWM``) is reset, one update runs (advantages, forward and backward over every micro-batch,
AdamW's first step, which allocates its state), and the new peak is read; then the same again for a
second update, which starts with AdamW's state already there (every later update of a run is like it).

- ``logprobs``: ``chunked`` makes the vocabulary-wide logits ``LOGPROB_CHUNK`` response tokens at a
  time (the default); ``whole`` makes them for a whole micro-batch at once (as before).
- ``recompute``: activations recomputed in the backward pass (on by default for a model this size).
- ``optimizer``: ``adamw`` (float32 moments, the default) or ``adamw8bit`` (bitsandbytes' 8-bit moments).
- ``runtime_gb``: the process's resident memory once Python, torch and transformers are imported.
- ``weights_gb``: the model's parameters in float32 (gradients and each of AdamW's two moments are as large).
- ``peak_gb``: the process's peak resident memory during the first update (everything included).
- ``update_gb``: that peak less the resident memory just before the update.
- ``second_peak_gb``: the process's peak resident memory during the second update.
- ``loss``: the first update's loss, the same whichever way logprobs are made.

    python benchmarks/update_memory.py --defaults # today's defaults only

    python benchmarks/update_memory.py            # a table
    python benchmarks/update_memory.py --json     # one JSON object per line
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CONFIGURATIONS = [
    ("whole", "off", 4096, "adamw"),
    ("chunked", "off", 4096, "adamw"),
    ("chunked", "on", 4096, "adamw"),
    ("chunked", "on", 1024, "adamw"),
    ("chunked", "on", 4096, "adamw8bit"),
    ("chunked", "on", 1024, "adamw8bit"),
]
"""The first is the update as it was before chunking; the third is today's defaults; the last uses the least memory."""
TRANSITIONS, TOKENS = 16, 4002
COLUMNS = (
    "logprobs",
    "recompute",
    "token_budget",
    "optimizer",
    "runtime_gb",
    "weights_gb",
    "peak_gb",
    "update_gb",
    "second_peak_gb",
    "update_s",
    "loss",
)
DEFAULTS = CONFIGURATIONS[2]


def _resident_gb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(logprobs: str, recompute: str, token_budget: int, optimizer: str) -> dict[str, Any]:
    """Two updates in this process; returns their figures."""
    import torch

    from relight.records import Transition
    from relight_torch.algorithms.grpo import GRPO
    from relight_torch.engine.torch_engine import TorchEngine
    from relight_torch.learner.packing import LOGPROB_CHUNK
    from relight_torch.models import smollm2

    runtime = _resident_gb("VmRSS")
    torch.manual_seed(0)
    engine = TorchEngine.from_pretrained(smollm2())
    vocab = engine.model.config.vocab_size
    prompts = [160 + 4 * i for i in range(TRANSITIONS)]
    responses = [30 + 4 * i for i in range(TRANSITIONS)]
    responses[-1] += TOKENS - sum(prompts) - sum(responses)
    transitions = [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id=f"task-{i // 4}",
            step=0,
            prompt_token_ids=torch.randint(3, vocab, (prompts[i],)).tolist(),
            response_token_ids=torch.randint(3, vocab, (responses[i],)).tolist(),
            reward=float(i % 4 in (0, 3)),
            policy_version=0,
        )
        for i in range(TRANSITIONS)
    ]
    algorithm = GRPO(
        engine,
        token_budget=token_budget,
        logprob_chunk=None if logprobs == "whole" else LOGPROB_CHUNK,
        recompute_activations=recompute == "on",
        optimizer=optimizer,
    )
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before = _resident_gb("VmRSS")
    began = time.perf_counter()
    metrics = algorithm.learn(transitions)
    first = {"peak_gb": _resident_gb("VmHWM"), "update_gb": _resident_gb("VmHWM") - before}
    elapsed = time.perf_counter() - began
    Path("/proc/self/clear_refs").write_text("5")
    algorithm.learn(transitions)
    return {
        "benchmark": "update_memory",
        "model": "SmolLM2-135M-Instruct",
        "logprobs": logprobs,
        "recompute": recompute,
        "token_budget": token_budget,
        "optimizer": optimizer,
        "transitions": TRANSITIONS,
        "tokens": TOKENS,
        "runtime_gb": round(runtime, 3),
        "weights_gb": round(sum(p.numel() for p in engine.model.parameters()) * 4 / 2**30, 3),
        "peak_gb": round(first["peak_gb"], 3),
        "update_gb": round(first["update_gb"], 3),
        "second_peak_gb": round(_resident_gb("VmHWM"), 3),
        "update_s": round(elapsed, 1),
        "loss": metrics["loss"],
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--defaults", action="store_true", help="measure today's defaults only")
    parser.add_argument(
        "--one", nargs=4, metavar=("LOGPROBS", "RECOMPUTE", "BUDGET", "OPTIMIZER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.one[1], int(args.one[2]), args.one[3])))
        return
    results = []
    for logprobs, recompute, budget, optimizer in [DEFAULTS] if args.defaults else CONFIGURATIONS:
        command = [sys.executable, __file__, "--one", logprobs, recompute, str(budget), optimizer]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    if not args.json:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"one GRPO update: SmolLM2-135M, {TRANSITIONS} transitions, {TOKENS} tokens")
        for column in COLUMNS:
            table.add_column(column, justify="left" if column in ("logprobs", "recompute", "optimizer") else "right")
        for row in results:
            table.add_row(*(f"{row[c]:.6g}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS))
        Console().print(table)


if __name__ == "__main__":
    main()
