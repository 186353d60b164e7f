"""Train one of the scenario examples on GPUs with relight-verl.

    python examples/gpu/train.py sql_agent|calc_agent|rag_agent|math_crew|coding_agent [--store sqlite:///runs/x.db]

The agent, its data and its role filter are the ones the CPU recipe trains; the model and verl's
settings come from the example's ``verl.yaml`` (the paper's model sizes). Batches follow the
paper's examples: 32 tasks x 4 samples per step, validation every 10 steps. Needs
``pip install 'relight-verl[gpu]'`` in an environment of its own (see packages/trainer-verl/README.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import relight
from relight.transitions.builder import RoleFilter, TransitionBuilder

EXAMPLES = Path(__file__).parents[1]


class Scenario(NamedTuple):
    folder: str
    """The example's folder under ``examples/``."""
    agent: str
    """``module:rollout`` of the agent."""
    data: str
    """``module`` whose ``load(split)`` gives the tasks."""
    splits: tuple[str, str]
    roles: RoleFilter = None


SCENARIOS = {
    "sql_agent": Scenario(
        "scenarios/sql_agent", "sql_agent:answer", "sql_data", ("train", "dev"), "write_query|rewrite_query"
    ),
    "calc_agent": Scenario("scenarios/calc_agent", "calc_agent:solve", "calc_data", ("train", "test")),
    "rag_agent": Scenario("scenarios/rag_agent", "rag_agent:research", "rag_data", ("train", "dev")),
    "math_crew": Scenario("scenarios/math_crew", "math_crew:solve", "math_crew", ("train", "test"), ["Analyst"]),
    "coding_agent": Scenario("frameworks/coding_agent", "coding_agent:codex", "coding_tasks", ("train", "test")),
}


def config_path(name: str) -> Path:
    return EXAMPLES / SCENARIOS[name].folder / "verl.yaml"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--store", default=None, help="a store URL; a SQLite file under runs/ by default")
    args = parser.parse_args(argv)
    from relight_verl import VerlAlgorithm, VerlConfig

    scenario = SCENARIOS[args.scenario]
    sys.path.insert(0, str(EXAMPLES / scenario.folder))
    module, _, rollout = scenario.agent.partition(":")
    agent = getattr(importlib.import_module(module), rollout)
    data = importlib.import_module(scenario.data)
    train, val = (data.load(split) for split in scenario.splits)
    trainer = relight.Trainer(
        VerlAlgorithm(VerlConfig.from_file(config_path(args.scenario))),
        store=args.store or f"sqlite:///runs/{args.scenario}-verl.db",
        batch_size=32,
        n_samples=4,
        concurrency=128,
        epochs=2,
        val_every=10,
        transitions=TransitionBuilder(roles=scenario.roles),
    )
    trainer.fit(agent, train, val)


if __name__ == "__main__":
    main()
