"""What ``show`` and ``export`` print about training: each call's verdict, and the reasons calls were left out.

The verdicts come from :meth:`relight.TransitionBuilder.explain`, the code that builds
the transitions, so these lines say what the dashboard says.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable

from rich.tree import Tree

from relight.transitions.builder import TransitionBuilder
from relight.transitions.verdicts import Reason, RolloutVerdict


def add_builder_options(parser: argparse.ArgumentParser) -> None:
    """How the run turned calls into transitions, so verdicts match what it trained."""
    parser.add_argument("--role", metavar="REGEX", help="keep the calls of roles matching this regular expression")
    parser.add_argument("--include-failed", action="store_true", help="failed rollouts' last attempts count too")


def builder_from(args: argparse.Namespace, **options: float | str) -> TransitionBuilder:
    return TransitionBuilder(roles=args.role, include_failed=args.include_failed, **options)  # pyright: ignore[reportArgumentType]


def verdict_tree(verdict: RolloutVerdict) -> Tree:
    """``training: 1 of 2 call(s) trained …`` with one line per LLM call saying why it was or was not."""
    tree = Tree(f"[bold]training[/] {verdict.summary()}")
    for call in verdict.calls:
        who = f"call {call.step if call.step is not None else '–'}" + (f" [magenta]{call.role}[/]" if call.role else "")
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
