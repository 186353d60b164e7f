"""One GRPO update of one batch, by relight's learner and by TRL's ``GRPOTrainer``: time, CPU, faults, memory.

``vs_trl.py`` measures each side's update time over a whole run, where other parts share it (relight's weight
push and transitions, the groups each side trains). This isolates the update: the same model, the same batch
(``--prompts`` questions of vs_trl's direct task x ``--samples`` completions, response lengths drawn around 38
tokens as the direct task's replies run, capped at 64; rewards alternate, so every group has signal and both
sides train every sample), the loss of TRL's default (``dapo``, group-scaled advantages, ε 0.2, no KL), AdamW,
gradients clipped at 1.0, activations recomputed in the backward pass on both sides. Each variant runs in a
process of its own, one warm-up update and then ``--repeats`` measured ones:

- ``relight``: ``GRPO(TorchEngine).learn`` on the batch's transitions, as a training step runs it (its learner
  fixes glibc's mmap threshold so that freed tensors go back to the system: ``relight_torch.learner.allocator``);
- ``relight-heap``: the same with glibc's default threshold, the allocator TRL's process runs with
  (``GRPO(..., return_freed_memory=False)``);
- ``trl``: ``GRPOTrainer.compute_loss``, the backward pass, clipping and the optimizer step, on the inputs TRL
  builds itself from the batch (a ``rollout_func`` hands it the ids, a reward function the rewards).

With ``--profile`` one more update of each variant runs under ``torch.profiler`` and its operators' table (by
own CPU time) goes to ``--out``/``<variant>-profile.txt``: where the CPU goes, operator by operator.

Reported per variant (the median of the repeats): ``wall_s``, ``user_s`` and ``sys_s`` (the process's CPU
seconds in the update), ``minor_faults`` (pages the kernel mapped in: each costs a zeroed page), and
``peak_rss_gb``, the process's peak resident memory. On a shared machine compare the CPU seconds, not the wall.

    python benchmarks/update_vs_trl.py                      # a table
    python benchmarks/update_vs_trl.py --variants relight trl --repeats 3 --json
    python benchmarks/update_vs_trl.py --profile --out runs/update_vs_trl   # and each variant's operator table
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("relight", "relight-heap", "trl")
COLUMNS = ("wall_s", "user_s", "sys_s", "minor_faults", "peak_rss_gb")


def batch(model_dir: Path, prompts: int, samples: int) -> dict[str, Any]:
    """Prompt ids (chat-rendered questions of the direct task), response ids of drawn lengths, rewards."""
    from vs_trl import chat_tokenizer, messages, problems

    tokenizer = chat_tokenizer(model_dir)
    rng = random.Random(0)
    questions = [problem["question"] for problem in problems("train")[:prompts]]
    rendered = [
        tokenizer.apply_chat_template(messages("direct", question), add_generation_prompt=True, tokenize=True)
        for question in questions
    ]
    prompt_ids = [list(ids if isinstance(ids, list) else ids["input_ids"]) for ids in rendered]
    lengths = [min(64, max(8, round(rng.gauss(38, 15)))) for _ in range(prompts * samples)]
    vocabulary = len(tokenizer) - 1
    responses = [[rng.randrange(100, vocabulary) for _ in range(n - 1)] + [tokenizer.eos_token_id] for n in lengths]
    return {
        "prompt_ids": [prompt_ids[i // samples] for i in range(prompts * samples)],
        "response_ids": responses,
        "rewards": [float(i % 2) for i in range(prompts * samples)],
        "samples": samples,
    }


def relight_update(model_dir: Path, data: dict[str, Any], *, heap: bool) -> Any:
    """A callable taking one relight GRPO update on the batch."""
    from relight.records import Transition
    from relight_torch.algorithms.grpo import GRPO
    from relight_torch.engine.torch_engine import TorchEngine

    engine = TorchEngine.from_pretrained(model_dir, name="policy")
    algorithm = GRPO(engine, lr=1e-5, betas=(0.9, 0.99), max_completion_length=64, return_freed_memory=not heap)
    transitions = [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id=f"task-{i // data['samples']}",
            step=0,
            prompt_token_ids=prompt,
            response_token_ids=response,
            response_logprobs=[-1.0] * len(response),
            reward=reward,
            policy_version=algorithm.policy_version,
        )
        for i, (prompt, response, reward) in enumerate(
            zip(data["prompt_ids"], data["response_ids"], data["rewards"], strict=True)
        )
    ]
    return lambda: algorithm.learn(transitions)


def trl_update(model_dir: Path, data: dict[str, Any]) -> Any:
    """A callable taking one TRL GRPO update on the batch, with the inputs TRL builds from it."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from vs_trl import chat_tokenizer

    size = len(data["rewards"])

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        logprobs = [[-1.0] * len(ids) for ids in data["response_ids"]]
        return {"prompt_ids": data["prompt_ids"], "completion_ids": data["response_ids"], "logprobs": logprobs,
                "given": data["rewards"]}  # fmt: skip

    def given(completions: list[Any], given: list[float], **_: Any) -> list[float]:
        return given

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=size,
        num_generations=data["samples"],
        max_completion_length=64,
        learning_rate=1e-5,
        adam_beta2=0.99,
        max_grad_norm=1.0,
        loss_type="dapo",
        scale_rewards="group",
        beta=0.0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=given,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": "x"}] * (size // data["samples"])),
        processing_class=chat_tokenizer(model_dir),
        rollout_func=rollout,
    )
    trainer.create_optimizer()
    model = trainer.model
    model.train()
    if config.gradient_checkpointing:  # as TRL's training loop enables it
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=config.gradient_checkpointing_kwargs)
    trainer.current_gradient_accumulation_steps = 1
    inputs = trainer._generate_and_score_completions([{"prompt": "x"}] * size)

    def update() -> None:
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.compute_loss(model, inputs).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        trainer.optimizer.step()

    return update


def child(spec: dict[str, Any]) -> None:
    """One variant, in this process: one warm-up update, then the measured ones, one JSON object each."""
    import torch

    from relight_torch.recipes.run_figures import peak_rss_gb

    torch.manual_seed(0)
    model_dir = Path(spec["model"])
    data = batch(model_dir, spec["prompts"], spec["samples"])
    variant = spec["variant"]
    heap = variant == "relight-heap"
    update = trl_update(model_dir, data) if variant == "trl" else relight_update(model_dir, data, heap=heap)
    update()
    for _ in range(spec["repeats"]):
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        update()
        wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_SELF)
        figures = {
            "wall_s": round(wall, 2),
            "user_s": round(after.ru_utime - before.ru_utime, 2),
            "sys_s": round(after.ru_stime - before.ru_stime, 2),
            "minor_faults": after.ru_minflt - before.ru_minflt,
            "peak_rss_gb": round(peak_rss_gb(), 2),
        }
        print(json.dumps(figures), flush=True)
    if spec["profile"]:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            update()
        table = profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        Path(spec["out"], f"{variant}-profile.txt").write_text(table + "\n", encoding="utf-8")


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one variant in a process of its own; the median of its updates."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{spec['variant']} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    median = {column: statistics.median(row[column] for row in rows) for column in COLUMNS}
    return {"benchmark": "update_vs_trl", "variant": spec["variant"], "samples": spec["prompts"] * spec["samples"],
            **median, "repeats": len(rows)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--prompts", type=int, default=4, help="questions (groups)")
    parser.add_argument("--samples", type=int, default=8, help="completions per question")
    parser.add_argument("--repeats", type=int, default=2, help="measured updates per variant, after a warm-up")
    parser.add_argument("--profile", action="store_true", help="profile one more update of each variant")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "update_vs_trl", help="profiles, the tiny model")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    from rich.console import Console
    from rich.table import Table
    from vs_trl import model_folder

    args.out.mkdir(parents=True, exist_ok=True)
    model = model_folder(args.model, args.out)
    results = []
    for variant in args.variants:
        spec = {"variant": variant, "model": str(model), "prompts": args.prompts, "samples": args.samples,
                "repeats": args.repeats, "profile": args.profile, "out": str(args.out)}  # fmt: skip
        results.append(measure(spec))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        return
    table = Table(title=f"one GRPO update of {args.prompts} x {args.samples} samples, {args.model}, median")
    for column in ("variant", *COLUMNS):
        table.add_column(column, justify="right")
    for result in results:
        table.add_row(result["variant"], *(str(result[column]) for column in COLUMNS))
    Console().print(table)


if __name__ == "__main__":
    main()
