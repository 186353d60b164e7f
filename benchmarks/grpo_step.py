"""One GRPO step of the calc scenario on each engine: its wall time (rollouts, update and weight push) and memory.

For each of ``--engines``, a process of its own runs the calc example's recipe (examples/scenarios/calc_agent: SmolLM2-
135M-Instruct, the same warm start, 4 problems x 8 samples per update, the top 10 layers trained) for
``--steps`` GRPO updates, with ``--eval`` held-out problems as its validation (the scenario uses 32; they are
not what is measured here). Reported per engine, from the run's metrics.jsonl:

- ``step_s``: mean wall time of a step after the first (the first one warms caches); ``rollouts_s`` and
  ``update_s`` its two parts. ``update_s`` includes making the new weights the served ones: the weight
  push into vLLM, or the swap inside TorchEngine.
- ``peak_gb``: the peak memory of the training process and every process under it (the vLLM server's too),
  sampled every 0.2 s, as the sum of their proportional set sizes (PSS: a page shared by several processes,
  such as the torch libraries each of them maps, is divided among them, so it counts once in the sum).
  ``peak_rss_sum_gb``: the peak of their summed resident sizes, which counts each shared page once per
  process that maps it (an upper bound).

    python benchmarks/grpo_step.py                           # TorchEngine against vLLM, a table
    python benchmarks/grpo_step.py --engines vllm --json     # one JSON object per line

Each run prints its own progress; its log is ``<out>/<engine>/train.log``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from _process_tree import TreePeak
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
CALC = ROOT / "examples" / "scenarios" / "calc_agent"


def child(engine: str, steps: int, eval_tasks: int, out: Path) -> None:
    """The run itself, in this process: the calc recipe with ``steps`` updates."""
    sys.path.insert(0, str(CALC))
    from calc_agent import solve  # type: ignore[import-not-found]
    from calc_data import load  # type: ignore[import-not-found]
    from calc_scripted import scripted_model  # type: ignore[import-not-found]
    from calc_train import RECIPE  # type: ignore[import-not-found]

    from relight_torch.recipes.warm_start_grpo import load_engine, train_agent

    recipe = replace(RECIPE, iterations=steps, eval_tasks=eval_tasks)
    model = load_engine(seed=recipe.seed)
    try:
        train_agent(
            solve, model, train=load("train"), val=load("test"), script=scripted_model, recipe=recipe, out=out,
            serve_with=engine,
        )  # fmt: skip
    finally:
        model.close()


def measure(engine: str, steps: int, eval_tasks: int, out: Path, console: Console) -> dict[str, Any]:
    folder = out / engine
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--child", engine, "--steps", str(steps), "--eval", str(eval_tasks)]
    console.print(f"[bold]{engine}[/]: {steps} GRPO steps of the calc recipe; log {folder / 'train.log'}")
    began = time.perf_counter()
    with (folder / "train.log").open("w") as log:
        process = subprocess.Popen([*command, "--out", str(folder)], stdout=log, stderr=subprocess.STDOUT)
        peak = TreePeak(process.pid)
        code = process.wait()
        peak_gb, peak_rss_sum_gb = peak.stop()
    if code != 0:
        raise SystemExit(f"the {engine} run failed (exit {code}); see {folder / 'train.log'}")
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = [row for row in rows if "time_update_s" in row][1:] or [row for row in rows if "time_update_s" in row]
    rollouts = statistics.fmean(row["time_rollouts_s"] for row in trained)
    update = statistics.fmean(row["time_update_s"] for row in trained)
    result = {
        "benchmark": "grpo_step",
        "engine": engine,
        "steps_timed": len(trained),
        "step_s": round(rollouts + update, 1),
        "rollouts_s": round(rollouts, 1),
        "update_s": round(update, 1),
        "peak_gb": round(peak_gb, 2),
        "peak_rss_sum_gb": round(peak_rss_sum_gb, 2),
        "wall_s": round(time.perf_counter() - began, 1),
    }
    console.print(f"  {engine}: step {result['step_s']} s, peak {result['peak_gb']} GB")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", nargs="+", default=["torch", "vllm"], choices=["torch", "vllm"])
    parser.add_argument("--steps", type=int, default=3, help="GRPO updates per engine (the first is not timed)")
    parser.add_argument("--eval", type=int, default=2, help="held-out problems in each validation")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "grpo_step")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--child", choices=["torch", "vllm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.eval, args.out)
        return
    console = Console(stderr=args.json)
    results = [measure(engine, args.steps, args.eval, args.out, console) for engine in args.engines]
    if args.json:
        for result in results:
            print(json.dumps(result))
        return
    table = Table(title="grpo_step: one GRPO step of the calc recipe, SmolLM2-135M")
    columns = ("engine", "step_s", "rollouts_s", "update_s", "peak_gb", "peak_rss_sum_gb", "steps_timed", "wall_s")
    for column in columns:
        table.add_column(column)
    for result in results:
        table.add_row(*(str(result[column]) for column in columns))
    console.print(table)


if __name__ == "__main__":
    main()
