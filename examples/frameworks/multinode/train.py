"""The multi-node recipe's trainer, rehearsed with relight-torch's tiny model (docs/many-machines.md).

Run on the head node of a Ray cluster whose CPU nodes were started with ``--resources '{"cpu_node": N}'``,
against a store server every node reaches (``relight store serve --store postgresql://…``)::

    RELIGHT_STORE_TOKEN=… python examples/frameworks/multinode/train.py --store http://store-host:8765 --runners 2

The algorithm, its engine and the gateway live here; the runners are Ray actors placed on the CPU
nodes, which send the agent's model calls back to this node's gateway. On GPU nodes swap the
algorithm for relight-verl's (docs/training/gpus.md). At the end it prints one
JSON line: the policy versions trained, the rollouts and how they ended, and the Ray nodes whose
runners did the attempts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

import ray

import relight
from relight.runners.ray_actors import RayRunners
from relight.store import Store
from relight_torch import GRPO, TorchEngine, tiny_model, tiny_tokenizer
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import problems


async def summary(store: Store, history: list[dict[str, float]]) -> dict[str, Any]:
    rollouts = await store.list_rollouts()
    workers = {a.worker_id for r in rollouts for a in await store.list_attempts(r.rollout_id)}
    node_ids = {worker.split("-node-")[1].split("-")[0] for worker in workers if "-node-" in worker}
    nodes = [node for node in ray.nodes() if node["NodeID"][:12] in node_ids]
    return {
        "policy_versions": [int(row["policy_version"]) for row in history if "policy_version" in row],
        # GRPO makes no update on a step whose groups all have equal rewards (no signal), so versions rise by these.
        "steps_with_signal": [int(row.get("groups_no_signal", 0) < row.get("groups", 1)) for row in history],
        "rollouts": dict(Counter(r.status.value for r in rollouts)),
        "runner_nodes": [sorted(k for k in node["Resources"] if not k.startswith("node:")) for node in nodes],
        "workers": len(workers),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="the store server, http://host:port")
    parser.add_argument("--ray-address", default="auto", help="the Ray cluster to join (default: auto)")
    parser.add_argument("--runners", type=int, default=2, help="runner actors on the CPU nodes")
    parser.add_argument("--steps", type=int, default=2, help="training steps")
    parser.add_argument("--gateway-host", default="0.0.0.0", help="where the gateway listens (all interfaces)")
    parser.add_argument("--gateway-port", type=int, default=8088, help="its port, for `relight runner` elsewhere")
    args = parser.parse_args()

    ray.init(address=args.ray_address, log_to_driver=False)
    tokenizer = tiny_tokenizer()
    engine = TorchEngine(tiny_model(tokenizer, seed=0), tokenizer)
    trainer = relight.Trainer(
        GRPO(engine, lr=1e-3),
        store=args.store,
        runners=RayRunners(args.runners, num_cpus=0.5, resources={"cpu_node": 1}),
        batch_size=2,
        n_samples=3,
        concurrency=3,
        gateway={"host": args.gateway_host, "port": args.gateway_port},
    )
    tasks = [{**p.as_task(), "temperature": 1.0} for p in problems(2 * args.steps, seed=0)]
    try:
        history = trainer.fit(calculator_agent, tasks)
    finally:
        engine.close()

    async def report() -> dict[str, Any]:
        store = relight.open_store(args.store)
        try:
            return await summary(store, history)
        finally:
            await store.close()

    print(json.dumps(asyncio.run(report())), flush=True)


if __name__ == "__main__":
    main()
