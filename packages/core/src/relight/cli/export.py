"""``relight export``: a store's finished rollouts as transitions in JSONL, for SFT or offline RL."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from relight.cli._common import AddCommand, add_store_option, with_store
from relight.cli._verdicts import add_builder_options, builder_for, left_out, training_summary
from relight.records import Mode
from relight.store import Store
from relight.transitions.builder import write_jsonl
from relight.transitions.verdicts import RolloutVerdict


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "export",
        help="write transitions as JSONL",
        description=(
            "Turn the store's finished rollouts into transitions (one LLM call each: prompt and response "
            "token ids, logprobs, credited reward, role, group) and write them as JSON lines."
        ),
    )
    add_store_option(parser)
    parser.add_argument("--out", "-o", metavar="PATH", default="-", help="the JSONL file (default: standard output)")
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="only train or only val rollouts")
    parser.add_argument("--credit", default="identical", help="credit assigner: identical, discounted, per_step, air")
    parser.add_argument("--gamma", type=float, help="the discount of discounted and per_step credit")
    parser.add_argument("--group-by-role", action="store_true", help="group by task and role rather than by task")
    add_builder_options(parser)
    parser.set_defaults(run=export)


def export(args: argparse.Namespace) -> int:
    options = {} if args.gamma is None else {"gamma": args.gamma}

    async def build(store: Store) -> tuple[list[RolloutVerdict], list[RolloutVerdict]]:
        builder = await builder_for(store, args, credit=args.credit, group_by_role=args.group_by_role, **options)
        rollouts = await store.list_rollouts(mode=Mode(args.mode) if args.mode else None)
        finished = [rollout for rollout in rollouts if rollout.is_finished]
        exported = [await builder.explain(store, rollout, training=False) for rollout in finished]
        trained = [await builder.explain(store, rollout) for rollout in finished]
        return exported, trained

    exported, trained = with_store(args, build)
    count = write_jsonl(
        (t for verdict in exported for t in verdict.transitions), sys.stdout if args.out == "-" else args.out
    )
    reasons = left_out(exported)
    Console(stderr=True).print(
        f"wrote {count} transition(s)"
        + (f"; calls left out: {reasons}" if reasons else "")
        + f"; {training_summary(trained)}",
        highlight=False,
        soft_wrap=True,
    )
    return 0
