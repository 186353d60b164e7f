"""Train the model inside Codex CLI or Claude Code on the CPU: the wiring, on a tiny model with a long context.

    python examples/frameworks/coding_agent/coding_train.py --cli codex --out runs/coding --updates 1

The coding CLIs send long prompts: their own instructions and some twenty tool schemas, ~6k (Codex)
to ~15k (Claude Code) tokens with a real tokenizer, more with the tiny model's 400-entry one. SmolLM2's
8,192-token context is too short for them, so this recipe trains relight_torch's tiny model built
from a config with a 65,536-token context (random weights, no download). It learns nothing useful
about code: the run shows that every piece works together (the unchanged CLI in its sandbox, the
gateway recording exact token ids and logprobs, tests as the reward, GRPO updates, the policy served
again), not a gain. For a model that can code, use the GPU recipe (``verl.yaml``).

An untrained model never picks a tool by itself, so the engine forces the first tool call of each
rollout (``force_first_tool_call``: the tool and its arguments are still the model's own samples,
and so are the recorded logprobs); the CLI then runs that call and sends its result back, a tool
round trip per rollout. Outputs are kept short (``--max-tokens``) so that a CPU gets through them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import coding_agent
import coding_tasks

import relight
from relight_torch import GRPO, TorchEngine, tiny_model, tiny_tokenizer

CONTEXT = 65_536


def engine(*, max_tokens: int, seed: int = 0) -> TorchEngine:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=seed, max_positions=CONTEXT)
    return TorchEngine(
        model, tokenizer, name="relight-tiny", seed=seed, default_max_tokens=max_tokens, force_first_tool_call=True
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", choices=["codex", "claude"], default="codex")
    parser.add_argument("--out", default=None, help="the run folder (runs/<time> by default)")
    parser.add_argument("--tasks", type=int, default=2, help="training tasks per update")
    parser.add_argument("--samples", type=int, default=2, help="rollouts per task (the GRPO group)")
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=48, help="the output budget of each model call")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per rollout")
    args = parser.parse_args(argv)
    policy = engine(max_tokens=args.max_tokens)
    agent = coding_agent.agent(args.cli, timeout=args.timeout, max_output_tokens=args.max_tokens)
    train = coding_tasks.load("train")[: args.tasks * args.updates]
    trainer = relight.Trainer(
        algorithm=GRPO(policy, lr=1e-3, token_budget=CONTEXT),
        batch_size=args.tasks,
        n_samples=args.samples,
        epochs=1,
        concurrency=args.tasks * args.samples,
        run_dir=args.out,
    )
    trainer.fit(agent, train, coding_tasks.load("test")[:1])


if __name__ == "__main__":
    main()
