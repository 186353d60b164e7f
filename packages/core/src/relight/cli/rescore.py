"""``relight rescore``: a changed reward over the stored rollouts, and what it does to each group's advantages."""

from __future__ import annotations

import argparse
import os
import sys

from rich.table import Table

from relight._internal import event_loop
from relight.cli._common import (
    AddCommand,
    add_json_option,
    add_store_option,
    output_console,
    print_json,
    refuse_bad_input_with_2,
    write_plot,
)
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.records import Mode
from relight.rewards.rescore import RescoreReport, bins, distribution, load_scorer, rescore, scorer_name, summary
from relight.rewards.rescore_plot import plot_rescore
from relight.run_folders.snapshot import read_run

__all__ = ["register"]

DEFAULT_PNG = "rescore.png"
SHOWN = 20
"""Rows of the flips and errors tables at most (``--json`` has them all)."""

_DESCRIPTION = """\
Give the stored rollouts a changed reward without sampling again, and see what it does to training:
how many groups gain or lose learning signal (a group has signal when its rewards are not all equal),
which rollouts' advantages flip sign, and the reward distribution before and after (a table, and a PNG).

REWARD is module:name, importable from the working directory: a function reward(task, rollout) -> float
| None (plain or async), where rollout is a relight.rewards.recorded.RecordedRollout (its messages, tool
calls and results, final answer and recorded rewards), or a group reward such as a
relight.rewards.Judge made in that module.

The recorded rewards are never changed. The new ones are stored beside them as spans of kind "rescored"
named --name (which training never reads), once every rollout has been scored; --dry-run stores
nothing. A reward that raises on a rollout is reported for that rollout. Exits 2 on bad input (a
reward that does not import, a folder that is no run folder, a --name already used).
"""


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "rescore",
        help="re-score stored rollouts with a changed reward and see how each group's advantages move",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_option(parser)
    parser.add_argument("--reward", required=True, metavar="MODULE:NAME", help="the changed reward (see above)")
    parser.add_argument(
        "--run",
        dest="run_dir",
        metavar="RUN_DIR",
        help="only this run's training rollouts, from its store (its store.db unless --store is given)",
    )
    parser.add_argument("--name", help="names the new reward (default: the function's or group reward's name)")
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="only train or only val rollouts")
    parser.add_argument(
        "--add",
        action="store_true",
        help="the new reward adds to the recorded ones, as a group reward (a judge) adds in training",
    )
    parser.add_argument("--dry-run", action="store_true", help="report only; store nothing")
    parser.add_argument("--png", metavar="PATH", help=f"the plot (default: {DEFAULT_PNG}; none with --json)")
    add_json_option(parser)
    refuse_bad_input_with_2(parser)
    parser.set_defaults(run=run_rescore)


def run_rescore(args: argparse.Namespace) -> int:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own modules import
    scorer = load_scorer(args.reward)
    url, prefix = _where(args)
    name = args.name or scorer_name(scorer)

    async def run() -> RescoreReport:
        store = open_store(url)
        try:
            return await rescore(
                store,
                scorer,
                name=name,
                rollout_prefix=prefix,
                mode=Mode(args.mode) if args.mode else None,
                adds=args.add,
                dry_run=args.dry_run,
            )
        finally:
            await store.close()

    report = event_loop.run(run())
    png: str | None = args.png if args.png or args.json else DEFAULT_PNG
    if args.json:
        print_json(_json(report))
    else:
        _print(report)
    write_plot(args, png, lambda path: plot_rescore(report, path), "plot in")
    return 0


def _where(args: argparse.Namespace) -> tuple[str, str | None]:
    """The store to read and the rollout ids to keep: ``--store``, or the run's own store and its training rollouts."""
    if args.run_dir is None:
        if not args.store:
            raise ConfigError("no store given: pass --store URL (or --run RUN_DIR), or set RELIGHT_STORE")
        return str(args.store), None
    run = read_run(args.run_dir)
    if args.store:
        return str(args.store), f"{run.run_id}-"
    own = run.path / "store.db"
    named = (run.summary or {}).get("store")
    if isinstance(named, str) and "://" in named:
        return named, f"{run.run_id}-"
    if own.is_file():
        return f"sqlite:///{own}", f"{run.run_id}-"
    raise ConfigError(f"the run in {run.path} has no store.db and its summary names no store URL: pass --store URL")


def _print(report: RescoreReport) -> None:
    console = output_console()
    counts = report.counts()
    scored = sum(r.after is not None for r in report.rollouts)
    where = f"stored as {report.stored} rescored span(s) named {report.name!r}" if report.stored else "nothing stored"
    console.print(
        f"rescored {scored} of {len(report.rollouts)} rollout(s) in {len(report.groups)} group(s) with "
        f"{report.name!r}" + (" (added to the recorded rewards)" if report.adds else "") + f"; {where}",
        highlight=False,
        soft_wrap=True,
    )
    if report.skipped:
        skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(report.skipped.items()))
        console.print(f"not rescored (only succeeded rollouts are trained): {skipped}", highlight=False)
    groups = Table(title="groups' learning signal (rewards not all equal)", title_justify="left")
    for column in ("gained", "lost", "kept", "still flat", "unknown"):
        groups.add_column(column, justify="right")
    groups.add_row(*(str(counts[key]) for key in ("gained", "lost", "kept", "flat", "unknown")))
    console.print(groups)
    moved = [g for g in report.groups if g.change in ("gained", "lost")]
    if moved:
        table = Table(title="groups whose signal changed", title_justify="left")
        for column in ("group", "change", "rewards before", "rewards after"):
            table.add_column(column)
        for group in moved[:SHOWN]:
            before = ", ".join(_number(r.before) for r in group.rollouts)
            after = ", ".join(_number(r.after) for r in group.rollouts)
            table.add_row(group.group_id, group.change, before, after)
        console.print(table)
    flips = report.flips
    table = Table(title=f"rollouts whose advantage flips sign ({len(flips)})", title_justify="left")
    for column in ("rollout", "group", "reward before", "after", "advantage before", "after"):
        table.add_column(column, justify="left" if column in ("rollout", "group") else "right")
    for rollout in flips[:SHOWN]:
        table.add_row(
            rollout.rollout_id,
            rollout.group_id,
            _number(rollout.before),
            _number(rollout.after),
            _number(rollout.advantage_before),
            _number(rollout.advantage_after),
        )
    console.print(table if flips else f"rollouts whose advantage flips sign: none of {len(report.rollouts)}")
    errors = report.errors
    if errors:
        table = Table(title=f"rollouts the reward could not score ({len(errors)})", title_justify="left")
        table.add_column("rollout")
        table.add_column("why")
        for rollout in errors[:SHOWN]:
            table.add_row(rollout.rollout_id, rollout.error or "")
        console.print(table)
    console.print(_distribution(report))


def _distribution(report: RescoreReport) -> Table:
    """Rollouts per reward before and after: per value when there are few values (a 0/1 reward), else per bin."""
    before = [r.before or 0.0 for r in report.rollouts]
    after = [r.after for r in report.rollouts]
    table = Table(title="reward distribution", title_justify="left")
    table.add_column("reward")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    values = sorted({round(v, 9) for v in (*before, *after) if v is not None})
    if len(values) <= 10:
        for value in values:
            was = sum(round(v, 9) == value for v in before)
            now = sum(v is not None and round(v, 9) == value for v in after)
            table.add_row(f"{value:.4g}", str(was), str(now))
    else:
        edges = bins([*before, *after], count=8)
        counts = zip(edges, edges[1:], distribution(before, edges), distribution(after, edges), strict=False)
        for low, high, was, now in counts:  # n edges, n - 1 bins
            table.add_row(f"{low:.3g} – {high:.3g}", str(was), str(now))
    if any(v is None for v in after):
        table.add_row("not scored", "", str(sum(v is None for v in after)))
    table.add_row("mean", *(_number(summary(v).get("mean")) for v in (before, after)))
    table.add_row("deviation", *(_number(summary(v).get("std")) for v in (before, after)))
    return table


def _json(report: RescoreReport) -> dict[str, object]:
    return {
        "name": report.name,
        "adds": report.adds,
        "stored": report.stored,
        "groups": dict(report.counts()),
        "skipped": dict(report.skipped),
        "rollouts": [
            {
                "rollout_id": r.rollout_id,
                "group_id": r.group_id,
                "before": r.before,
                "new": r.new,
                "after": r.after,
                "advantage_before": r.advantage_before,
                "advantage_after": r.advantage_after,
                "flipped": r.flipped,
                "error": r.error,
            }
            for r in report.rollouts
        ],
        "group_changes": {g.group_id: g.change for g in report.groups},
        "before": summary(r.before or 0.0 for r in report.rollouts),
        "after": summary(r.after for r in report.rollouts),
    }


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) and not isinstance(value, bool) else "–"
