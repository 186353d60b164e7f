"""The paper's scenarios trained on this machine's CPU: held-out reward before and after RL, time, memory, speed.

Each seed runs the example's own training command (``examples/scenarios/<folder>/<name>_train.py``: SmolLM2-135M-
Instruct, a warm start on scripted demonstrations, then GRPO through ``relight.Trainer.fit``) in a
process of its own, and reads back the ``scenario.json`` it writes in its run folder:

- ``before`` / ``after``: greedy held-out reward after the warm start, measured by the validation that ran
  before the first RL update (the run's ``initial_val_reward_mean``), and by the one after the last update
  (``final_val_reward_mean``); ``gain`` is RL's own. A run without either figure is an error, never a guess.
- ``wall_s`` (the whole run), ``rl_s`` (RL and both evaluations), ``peak_gb`` (the training
  process's peak resident memory).
- ``calls_per_s``, ``gen_tok_per_s``: LLM calls and generated tokens per second of rollout time;
  ``train_tok_per_s``: prompt and response tokens per second of GRPO update time.
- ``<role>_before`` / ``<role>_after``: each role's held-out reward, the credit relight gives the role's calls
  (a role's own reward where the agent emits one, as the sql checker's verdict accuracy; else the episode's)
  averaged per rollout.
- ``verify``: what ``relight verify`` says of the run's store (``clean``, or the kinds of problem it found).

The *before* figures come from the validation before the first update. With several seeds, a last row gives
each figure's mean and its spread across the seeds (the sample standard deviation), and ``--json`` a last
object with both.

    python benchmarks/scenarios.py --scenario calc --seeds 0 1 2        # a table
    python benchmarks/scenarios.py --scenario sql --seeds 0 --json      # one JSON object per line
    python benchmarks/scenarios.py --scenario calc --engine torch       # TorchEngine instead of vLLM
    python benchmarks/scenarios.py --scenario sql --policies 2 --seeds 0 1 2   # one policy per role, one shared

With ``--policies N`` (sql, crew: the examples that name policies) each seed runs twice with the same roles
trained, warm start and budget: as one shared LoRA policy (``--policies 1``) and as N policies, one LoRA
adapter each (sql: the writer/rewriter and the checker; crew: the analyst and the reporter). Reported besides:
``policies``, each role's held-out reward before and after (below), and ``wall_ratio``, the N-policy run's
wall time over the shared policy's of the same seed.

Rollouts are sampled by a vLLM server (relight_torch.vllm) wherever the vLLM environment (.venv-vllm) exists,
as the training commands do by default; ``--engine torch`` samples with TorchEngine in the training process.

Figures measured with it, with their commands, commits and dates: docs/results.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from relight.integrity import verify_store
from relight.stores.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "calc": ROOT / "examples" / "scenarios" / "calc_agent" / "calc_train.py",
    "sql": ROOT / "examples" / "scenarios" / "sql_agent" / "sql_train.py",
    "rag": ROOT / "examples" / "scenarios" / "rag_agent" / "rag_train.py",
    "crew": ROOT / "examples" / "scenarios" / "math_crew" / "crew_train.py",
}
COLUMNS = ("before", "after", "gain", "wall_s", "rl_s", "peak_gb", "calls_per_s", "gen_tok_per_s", "train_tok_per_s")
POLICY_COLUMNS = ("policies", "wall_ratio")
"""Added with ``--policies``: the number of policies and the wall-time ratio (each role's figures follow)."""


def run(scenario: str, seed: int, out: Path, extra: list[str]) -> dict[str, Any]:
    """Train one seed in a subprocess (its output goes to ``out/train.log``) and return its figures."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(SCRIPTS[scenario]), "--out", str(out), "--seed", str(seed), *extra]
    with (out / "train.log").open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{scenario} seed {seed} failed (exit {done.returncode}); see {out / 'train.log'}")
    summary = json.loads((out / "scenario.json").read_text())
    measured = json.loads((out / "summary.json").read_text())  # the trainer's: only figures a validation measured
    if "initial_val_reward_mean" not in measured or "final_val_reward_mean" not in measured:
        raise SystemExit(f"{scenario} seed {seed}: no validation before the first update or after the last; see {out}")
    before, after = measured["initial_val_reward_mean"], measured["final_val_reward_mean"]
    return {
        "benchmark": "scenarios",
        "scenario": scenario,
        "seed": seed,
        "before": before,
        "after": after,
        "gain": after - before,
        "iterations": summary["iterations"],
        "wall_s": summary["wall_seconds"],
        "rl_s": summary["rl_seconds"],
        "peak_gb": summary["peak_memory_gb"],
        "calls_per_s": summary["train_llm_calls_per_s"],
        "gen_tok_per_s": summary["generated_tokens_per_s"],
        "train_tok_per_s": summary["trained_tokens_per_s"],
        "policies": len(summary.get("policies") or {}) or 1,
        "policy_versions": summary.get("policy_versions") or {},
        **{
            f"{name}_{when}": value
            for name, figures in (summary.get("held_out_figures") or {}).items()
            for when, value in figures.items()
        },
        **{
            f"{role}_{when}": value
            for role, figures in (summary.get("held_out_by_role") or {}).items()
            for when, value in figures.items()
        },
        "verify": asyncio.run(_verify(out / "store.db")),
        "run_folder": str(out),
    }


async def _verify(path: Path) -> str:
    """``relight verify``'s verdict on a run's store: ``clean``, or the kinds of problem and how many of each."""
    store = SqliteStore(path)
    try:
        report = await verify_store(store)
    finally:
        await store.close()
    return "clean" if report.clean else ", ".join(f"{f.count} {kind}" for kind, f in report.problems.items())


def spread(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's mean and sample standard deviation across the seeds of ``results`` (None for one seed)."""
    figures: dict[str, Any] = {"benchmark": "scenarios", "seeds": [r["seed"] for r in results]}
    numbers = {k for r in results for k, v in r.items() if isinstance(v, int | float) and k not in ("seed", "policies")}
    for column in sorted(numbers):
        values = [r[column] for r in results if isinstance(r.get(column), int | float)]
        if values:
            figures[column] = {
                "mean": statistics.fmean(values),
                "sd": statistics.stdev(values) if len(values) > 1 else None,
            }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=sorted(SCRIPTS), required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, help="GRPO updates per seed (default: the example's recipe)")
    parser.add_argument("--quick", action="store_true", help="two tiny steps per seed, to check the wiring")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "scenarios", help="where run folders go")
    parser.add_argument("--engine", choices=["vllm", "torch"], help="what samples (default: vLLM if installed)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument(
        "--policies", type=int, help="sql, crew: each seed with one shared policy and with this many (LoRA, vLLM)"
    )
    args = parser.parse_args()
    extra = [*(["--iterations", str(args.iterations)] if args.iterations else []), *(["--quick"] if args.quick else [])]
    extra += ["--engine", args.engine] if args.engine else []
    if args.policies is not None and args.policies < 1:
        parser.error(f"--policies must be 1 or more, got {args.policies}")
    counts = [] if args.policies is None else sorted({1, args.policies})
    console = Console(stderr=args.json)
    results = []
    for seed in args.seeds:
        one_policy: dict[str, Any] | None = None
        for count in counts or [None]:
            label = f"{args.scenario}-seed{seed}" + (f"-policies{count}" if count else "")
            chosen = ["--policies", str(count)] if count else []
            with console.status(f"{args.scenario}: training seed {seed}" + (f", {count} policies…" if count else "…")):
                result = run(args.scenario, seed, args.out / label, extra + chosen)
            if count == 1:
                one_policy = result
            if count and one_policy is not None:
                result["wall_ratio"] = result["wall_s"] / one_policy["wall_s"]
            results.append(result)
            if args.json:
                print(json.dumps(result), flush=True)
    groups = [[r for r in results if r["policies"] == n] for n in sorted({r["policies"] for r in results})]
    spreads = [{**spread(group), "scenario": args.scenario, "policies": group[0]["policies"]} for group in groups]
    if args.json:
        for figures in spreads if len(args.seeds) > 1 else []:
            print(json.dumps(figures), flush=True)
        return
    roles = sorted({key for result in results for key in result if key.endswith(("_before", "_after"))})
    columns = COLUMNS + ((*POLICY_COLUMNS, *roles) if counts else ())
    table = Table(title=f"{args.scenario}: SmolLM2-135M-Instruct on the CPU, held-out reward", title_justify="left")
    table.add_column("seed", justify="right")
    for column in (*columns, "verify"):
        table.add_column(column, justify="left" if column == "verify" else "right")
    for result in results:
        table.add_row(str(result["seed"]), *(_cell(result, c) for c in columns), result["verify"])
    for figures in spreads if len(args.seeds) > 1 else []:
        label = "mean ± sd" + (f" ({figures['policies']} policies)" if counts else "")
        table.add_row(label, *(_spread_cell(figures, c) for c in columns), "")
    console.print(table)


def _spread_cell(figures: dict[str, Any], column: str) -> str:
    figure = figures.get(column)
    if column == "policies":
        return str(figures["policies"])
    if not isinstance(figure, dict):
        return "-"
    sd = "" if figure["sd"] is None else f" ± {figure['sd']:.2g}"
    return f"{figure['mean']:.3g}{sd}"


def _cell(result: dict[str, Any], column: str) -> str:
    value = result.get(column)
    if value is None:
        return "-"
    return f"{value:.0f}" if column in ("wall_s", "policies") else f"{value:.3g}"


if __name__ == "__main__":
    main()
