"""What ``show`` and ``export`` print about training: each call's verdict, and the reasons calls were left out.

The verdicts come from :meth:`relight.TransitionBuilder.explain`, the code that builds
the transitions, judged with the role filter the run published (:mod:`relight.transitions.run_config`),
so these lines say what the dashboard says.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable

from rich.tree import Tree

from relight.store import Store
from relight.transitions.builder import TransitionBuilder
from relight.transitions.run_config import builder_of_run
from relight.transitions.verdicts import Reason, RolloutVerdict, call_numbers


def add_builder_options(parser: argparse.ArgumentParser) -> None:
    """How the run turned calls into transitions; by default, what the run itself published."""
    parser.add_argument(
        "--role",
        metavar="REGEX",
        help="keep the calls of roles matching this regular expression (default: the run's own role filter or "
        "policies)",
    )
    parser.add_argument(
        "--include-failed",
        action="store_true",
        default=None,
        help="failed rollouts' last attempts count too (default: as the run did)",
    )
    parser.add_argument(
        "--include-inexact",
        action="store_true",
        default=None,
        help="calls whose token ids are not exactly the call (text, tool calls or tools missing) count too; by "
        "default they are left out and counted (default: as the run did)",
    )


async def builder_for(store: Store, args: argparse.Namespace, **options: float | str) -> TransitionBuilder:
    """The builder the run used (:func:`relight.transitions.run_config.builder_of_run`), as the options amend it."""
    run = await builder_of_run(store)
    roles = args.role if args.role is not None else (run.roles if run is not None else None)
    include_failed = (
        args.include_failed if args.include_failed is not None else (run is not None and run.include_failed)
    )
    include_inexact = (
        args.include_inexact if args.include_inexact is not None else (run is not None and run.include_inexact)
    )
    # The run's policies judge as the run did, unless --role asks for one role filter instead.
    policies = run.policies if run is not None and args.role is None else None
    return TransitionBuilder(
        roles=roles,
        policies=policies,
        include_failed=include_failed,
        include_inexact=include_inexact,
        **options,  # pyright: ignore[reportArgumentType]
    )


def verdict_tree(verdict: RolloutVerdict) -> Tree:
    """``training: 1 of 2 call(s) trained …`` with one line per LLM call saying why it was or was not.

    Calls are numbered as ``--text`` numbers them (:func:`~relight.transitions.verdicts.call_numbers`)."""
    tree = Tree(f"[bold]training[/] {verdict.summary()}")
    numbers = call_numbers(call.span for call in verdict.calls)
    for call in verdict.calls:
        who = f"call {numbers[call.span.span_id]}" + (f" [magenta]{call.role}[/]" if call.role else "")
        if call.policy is not None:
            who += f" policy [bold magenta]{call.policy}[/]"
        if call.trained:
            notes = f" ({', '.join(note.value for note in call.notes)})" if call.notes else ""
            tree.add(f"{who} [green]trained[/]{notes}  reward {call.reward:g}  [dim]{call.span.span_id}[/]")
        else:
            assert call.reason is not None
            tree.add(f"{who} [red]not trained: {call.reason.value}[/]  [dim]{call.detail}  {call.span.span_id}[/]")
    return tree


def left_out(verdicts: Iterable[RolloutVerdict]) -> str:
    """``3 filtered role, 2 failed rollout`` over many rollouts; empty when every call was kept."""
    counts: Counter[Reason] = Counter()
    for verdict in verdicts:
        counts.update(verdict.reasons())
    return ", ".join(f"{count} {reason.value}" for reason, count in counts.most_common())


def training_summary(verdicts: Iterable[RolloutVerdict]) -> str:
    """``the run trained 4 of 12 call(s); not trained: 8 filtered role`` over many rollouts."""
    judged = list(verdicts)
    calls = sum(len(verdict.calls) for verdict in judged)
    trained = sum(call.trained for verdict in judged for call in verdict.calls)
    reasons = left_out(judged)
    return f"the run trained {trained} of {calls} call(s)" + (f"; not trained: {reasons}" if reasons else "")
