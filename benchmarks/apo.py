"""Prompt optimisation on the CPU: relight's APO beside GEPA's reference implementation, same agent, model and budget.

For each scenario and seed, SmolLM2-135M-Instruct served by vLLM (relight_torch's server, from
.venv-vllm) is both the agent's model and the optimiser. The agent is the example's own (examples/
calc_agent, examples/scenarios/rag_agent), reading its system prompt as a resource; every rollout samples
greedily (``temperature: 0``), so a prompt's reward on a task is its own and not the draw's.

- **relight-apo**: ``Trainer(algorithm=APO(...)).fit(agent, train, val)`` with the budget in rollouts.
- **gepa**: ``gepa.optimize(...)`` (the ``gepa`` package) with ``max_metric_calls`` = the same budget,
  driving the same agent through relight (benchmarks/_gepa_adapter.py: a ``GEPAAdapter`` whose
  evaluations are relight rollouts), the same minibatch size, the same optimiser model.

Both start from the example's prompt; both see the same training and validation tasks. Afterwards the
seed prompt and each method's best prompt are run on held-out tasks neither saw. Columns: held-out
reward of the seed and of the best prompt, the gain, rollouts spent (a method may end its last round
past the budget: GEPA checks it between iterations), the optimiser's calls and tokens, wall time.

    python benchmarks/apo.py --scenario calc rag --seeds 0 1 2          # a table
    python benchmarks/apo.py --scenario calc --seeds 0 --json           # one JSON object per line
    python benchmarks/apo.py --scenario calc --quick                    # a tiny budget, to check the wiring

Each (scenario, seed) runs in a process of its own (output in ``<out>/<scenario>-seed<n>/bench.log``),
against one vLLM server this process starts. ``--model PATH`` serves another folder (a warm-started one).
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("held_out_seed", "held_out_best", "gain", "rollouts", "optimizer_calls", "optimizer_tokens", "wall_s")


@dataclass(frozen=True)
class Scenario:
    """An example agent and its data: the module and names to import, how its splits are cut."""

    folder: str
    module: str
    agent: str
    prompt: str
    data: str
    train_split: str
    held_split: str
    """Validation tasks come first in this split, held-out tasks after them."""


SCENARIOS = {
    "calc": Scenario("calc_agent", "calc_agent", "solve", "SYSTEM_PROMPT", "calc_data", "train", "test"),
    "rag": Scenario("rag_agent", "rag_agent", "research", "INSTRUCTIONS", "rag_data", "train", "dev"),
}
SIZES = {"train": 64, "val": 16, "test": 32, "budget": 150, "minibatch": 4}
QUICK = {"train": 4, "val": 2, "test": 2, "budget": 10, "minibatch": 2}


def tasks(scenario: Scenario, sizes: dict[str, int]) -> tuple[list[Any], list[Any], list[Any]]:
    """Training, validation and held-out tasks, each sampled greedily."""
    sys.path.insert(0, str(ROOT / "examples" / "scenarios" / scenario.folder))
    load = importlib.import_module(scenario.data).load
    greedy = [{**task, "temperature": 0.0} for task in load(scenario.train_split)[: sizes["train"]]]
    held = [{**task, "temperature": 0.0} for task in load(scenario.held_split)]
    val, test = held[: sizes["val"]], held[sizes["val"] : sizes["val"] + sizes["test"]]
    return greedy, val, test


def measure(name: str, seed: int, server: str, model: str, out: Path, sizes: dict[str, int]) -> list[dict[str, Any]]:
    """One scenario and seed: the seed prompt, relight's APO and GEPA, each best prompt held out (in this process)."""
    import gepa
    from _agent_runs import AgentRuns, mean
    from _gepa_adapter import Reflector, RelightAdapter

    import relight
    from relight_apo import APO, Optimizer

    scenario = SCENARIOS[name]
    train, val, test = tasks(scenario, sizes)
    example = importlib.import_module(scenario.module)
    agent, seed_prompt = getattr(example, scenario.agent), getattr(example, scenario.prompt)
    common = {"benchmark": "apo", "scenario": name, "seed": seed, "budget": sizes["budget"], "run_folder": str(out)}
    # One runner at a time in this process: relight's tracing sends the spans of the process to the runner
    # started last, so the harness's runner and the trainer's never live side by side.
    with AgentRuns(agent, server, model, chars=1500) as runs:
        held_out_seed = mean(runs.run(test, {"system_prompt": seed_prompt}))

    began = time.perf_counter()
    apo = APO(
        {"system_prompt": seed_prompt},
        optimizer=Optimizer(base_url=server, model=model, max_tokens=768, timeout=900),
        base_url=server,
        model=model,
        budget=sizes["budget"],
        minibatch=sizes["minibatch"],
        show_chars=1500,
        seed=seed,
    )
    quiet = Console(file=io.StringIO())
    relight.Trainer(algorithm=apo, run_dir=out / "apo", concurrency=8, console=quiet).fit(agent, train, val)
    apo_wall = time.perf_counter() - began
    assert apo.best is not None
    assert apo.state is not None
    apo_best, usage = str(apo.best["system_prompt"]), apo.state.usage

    with AgentRuns(agent, server, model, chars=1500) as runs:
        began = time.perf_counter()
        reflector = Reflector(server, model, max_tokens=768)
        result = gepa.optimize(
            seed_candidate={"system_prompt": seed_prompt},
            trainset=train,
            valset=val,
            adapter=RelightAdapter(runs),
            reflection_lm=reflector,
            max_metric_calls=sizes["budget"],
            reflection_minibatch_size=sizes["minibatch"],
            seed=seed,
            run_dir=str(out / "gepa"),
        )
        gepa_wall, gepa_spent = time.perf_counter() - began, runs.rollouts
        chosen = result.best_candidate
        gepa_best = str(chosen["system_prompt"] if isinstance(chosen, dict) else chosen)
        held_out = {best: mean(runs.run(test, {"system_prompt": best})) for best in {apo_best, gepa_best}}

    rows = [
        common
        | {
            "method": "relight-apo",
            "held_out_seed": held_out_seed,
            "held_out_best": held_out[apo_best],
            "rollouts": apo.state.spent,
            "rounds": apo.state.round,
            "candidates": dict(apo.state.counts),
            "optimizer_calls": usage.calls,
            "optimizer_tokens": usage.input_tokens + usage.output_tokens,
            "optimizer_input_tokens": usage.input_tokens,
            "optimizer_output_tokens": usage.output_tokens,
            "wall_s": apo_wall,
            "best_prompt": apo_best,
        },
        common
        | {
            "method": "gepa",
            "held_out_seed": held_out_seed,
            "held_out_best": held_out[gepa_best],
            "rollouts": gepa_spent,
            "candidates": {"tried": len(result.candidates)},
            "optimizer_calls": reflector.calls,
            "optimizer_tokens": reflector.input_tokens + reflector.output_tokens,
            "optimizer_input_tokens": reflector.input_tokens,
            "optimizer_output_tokens": reflector.output_tokens,
            "wall_s": gepa_wall,
            "best_prompt": gepa_best,
        },
    ]
    for row in rows:
        row["gain"] = row["held_out_best"] - row["held_out_seed"]
    return rows


def run_one(name: str, seed: int, server: str, model: str, out: Path, quick: bool) -> list[dict[str, Any]]:
    """:func:`measure` in a process of its own (its output in ``out/bench.log``); its rows."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--one", name, str(seed), "--server", server, "--served-as", model]
    command += ["--out", str(out), *(["--quick"] if quick else [])]
    with (out / "bench.log").open("w") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} seed {seed} failed (exit {done.returncode}); see {out / 'bench.log'}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", nargs="+", choices=sorted(SCENARIOS), default=sorted(SCENARIOS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--quick", action="store_true", help="a tiny budget and few tasks, to check the wiring")
    parser.add_argument("--model", type=Path, help="the model folder to serve (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "apo-bench", help="where run folders go")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--one", nargs=2, metavar=("SCENARIO", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    parser.add_argument("--served-as", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    if args.one:
        name, seed = args.one[0], int(args.one[1])
        for row in measure(name, seed, args.server, args.served_as, args.out, QUICK if args.quick else SIZES):
            print(json.dumps(row), flush=True)
        return
    from relight_torch import vllm
    from relight_torch.models import smollm2
    from relight_torch.vllm import VLLMServer, VLLMServerOptions

    console = Console(stderr=args.json)
    template = Path(vllm.__file__).with_name("chatml_tools.jinja")  # SmolLM2's own template renders no tools
    options = VLLMServerOptions(chat_template=str(template), max_model_len=8192, kv_cache_gib=3)
    rows: list[dict[str, Any]] = []
    server = VLLMServer(args.model or smollm2(), served_name="smollm2", options=options)
    with console.status("starting the vLLM server…"):
        server.start()
    with server:
        for name in args.scenario:
            for seed in args.seeds:
                with console.status(f"{name}: seed {seed}, relight-apo then gepa…"):
                    found = run_one(name, seed, server.base_url, "smollm2", args.out / f"{name}-seed{seed}", args.quick)
                rows += found
                if args.json:
                    for row in found:
                        print(json.dumps(row), flush=True)
    if args.json:
        return
    table = Table(
        title="prompt optimisation: SmolLM2-135M-Instruct as agent and optimiser, held-out reward", title_justify="left"
    )
    for column in ("scenario", "seed", "method", *COLUMNS):
        table.add_column(column, justify="left" if column in ("scenario", "method") else "right")
    for row in rows:
        table.add_row(row["scenario"], str(row["seed"]), row["method"], *(_cell(row, c) for c in COLUMNS))
    console.print(table)


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None:
        return "-"
    return f"{value:.0f}" if column in ("rollouts", "optimizer_calls", "optimizer_tokens", "wall_s") else f"{value:.3g}"


if __name__ == "__main__":
    main()
