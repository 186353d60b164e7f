"""Train the support agent with GRPO on SmolLM2-135M-Instruct, its only reward a judge model's ranking.

    python examples/frameworks/judge_agent/support_train.py --out runs/judge --steps 2
    python examples/frameworks/judge_agent/support_train.py --judge-url https://api.openai.com/v1 \
        --judge-model gpt-4.1-mini

The policy is served in this process by relight-torch and trained by its GRPO. The judge is any
OpenAI-compatible endpoint; by default SmolLM2-135M-Instruct itself, frozen, served by
``python -m relight_torch.server`` in a process of its own: a weak judge (it often ranks at random
or answers with no JSON at all), enough to show the wiring, not to teach the agent much. After
training, the script prints what the judge saw and decided for the first group.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support_agent import RUBRIC, TASKS, support

import relight
from relight import semconv
from relight.rewards import Judge, render_rollout
from relight.store import Store
from relight.transitions.builder import last_attempt_spans


@contextmanager
def served_judge(path: Path, name: str) -> Iterator[str]:
    """``path`` served by relight-torch's OpenAI-compatible server on 127.0.0.1 for the block; its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    command = [sys.executable, "-m", "relight_torch.server", str(path), "--name", name, "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "Uvicorn running on" in line:
                break
        else:
            raise RuntimeError(f"the judge's server exited with {server.wait()} before serving")
        threading.Thread(target=server.stderr.read, daemon=True).start()
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


async def what_the_judge_saw(store: Store, judge: Judge, group_id: str) -> str:
    """The judge's prompt for one group, rebuilt from the store's spans, and each rollout's verdict."""
    rollouts = await store.list_rollouts(group_id=group_id)
    rendered, verdicts = [], []
    for rollout in rollouts:
        spans = await last_attempt_spans(store, rollout.rollout_id)
        rendered.append(render_rollout(rollout.rollout_id, spans, max_chars=judge.max_chars))
        notes = [s.attributes.get(semconv.ANNOTATION) for s in spans if s.name == f"annotation {judge.name}"]
        verdicts.append(json.loads(str(notes[-1])) if notes else None)
    labels = [chr(ord("A") + index) for index in range(len(rendered))]
    lines = [f"{m['role']}:\n{m['content']}" for m in judge.messages(rollouts[0].input, rendered, labels)]
    lines += [f"verdict on {label}: {json.dumps(v)}" for label, v in zip(labels, verdicts, strict=True)]
    return "\n\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/judge"), help="the run folder (default: runs/judge)")
    parser.add_argument("--steps", type=int, default=2, help="GRPO updates")
    parser.add_argument("--batch-size", type=int, default=2, help="questions per update")
    parser.add_argument("--n-samples", type=int, default=4, help="replies per question: one group for the judge")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--judge-url", help="an OpenAI-compatible endpoint; SmolLM2 served here by default")
    parser.add_argument("--judge-model", default="smollm2-judge")
    parser.add_argument("--judge-timeout", type=float, default=600.0, help="seconds one judge call may take")
    parser.add_argument("--judge-max-tokens", type=int, default=160, help="the longest judge reply asked for")
    args = parser.parse_args()

    from relight_torch import GRPO, TorchEngine, smollm2

    path = smollm2()
    engine = TorchEngine.from_pretrained(path)
    algorithm = GRPO(engine, lr=args.lr)
    tasks = TASKS[: args.steps * args.batch_size]
    with served_judge(path, args.judge_model) if args.judge_url is None else _given(args.judge_url) as judge_url:
        judge = Judge(
            RUBRIC,
            base_url=judge_url,
            model=args.judge_model,
            timeout=args.judge_timeout,
            max_tokens=args.judge_max_tokens,
        )
        trainer = relight.Trainer(
            algorithm,
            batch_size=args.batch_size,
            n_samples=args.n_samples,
            group_rewards=[judge],
            run_dir=args.out,
        )
        history = await trainer.afit(support, tasks)
        for step in history:
            print({key: round(value, 3) for key, value in step.items() if key.startswith(("step", "judge", "reward"))})
        store = relight.open_store(f"sqlite:///{args.out.resolve() / 'store.db'}")
        try:
            print(await what_the_judge_saw(store, judge, "step1-task0"))
        finally:
            await store.close()


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    asyncio.run(main())
