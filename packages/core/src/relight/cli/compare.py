"""``relight compare``: runs side by side in the terminal, and their curves overlaid in a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from relight.cli._common import (
    AddCommand,
    add_json_option,
    output_console,
    print_json,
    refuse_bad_input_with_2,
    write_plot,
)
from relight.run_folders.compare import RunComparison, compare_runs
from relight.run_folders.plot import plot_comparison
from relight.run_folders.snapshot import RunSnapshot, find_runs, read_run

__all__ = ["register"]

DEFAULT_PNG = "compare.png"
CURVE_ROWS = 20
"""Steps shown in the terminal's curve table at most (evenly spread, the last always among them); the PNG has all."""


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "compare",
        help="compare runs: settings that differ, curves, final figures, wall time",
        description="Set run folders side by side: the settings that differ between them (from each run.json), "
        "each run's final figures and wall time, its training and validation reward by step, and a PNG of the "
        "curves overlaid. RUN may be a run folder or a folder of them (runs/). Runs of different lengths and runs "
        "still training compare alike. Reads the folders only. Exits 2 when a folder is no run folder this "
        "relight can read.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders (runs/<run>), or folders of them")
    parser.add_argument(
        "--png",
        metavar="PATH",
        help=f"where the overlaid curves go (default: {DEFAULT_PNG} in the working directory; none with --json)",
    )
    add_json_option(parser)
    refuse_bad_input_with_2(parser)
    parser.set_defaults(run=compare)


def compare(args: argparse.Namespace) -> int:
    runs = [read_run(path) for path in find_runs(args.runs)]
    comparison = compare_runs(runs)
    png: str | None = args.png if args.png or args.json else DEFAULT_PNG
    if args.json:
        print_json(comparison.to_json() | ({"png": str(Path(png).resolve())} if png else {}))
    else:
        _print(comparison)
    write_plot(args, png, lambda path: plot_comparison(comparison, path), "curves overlaid in")
    return 0


def _print(comparison: RunComparison) -> None:
    console = output_console()
    figures = Table(title="runs", title_justify="left")
    for column in ("run", "status", "steps", "final train reward", "val before", "final val", "best val"):
        figures.add_column(column, justify="left" if column in ("run", "status") else "right")
    figures.add_column("policy version", justify="right")
    figures.add_column("wall time", justify="right")
    for row in comparison.figures():
        figures.add_row(
            str(row["run"]),
            str(row["status"]),
            str(row["steps"]),
            *(_number(row[key]) for key in _FIGURES),
            _number(row["policy_version"]),
            _duration(row["wall_seconds"]),
        )
    console.print(figures)
    differing = Table(title="settings that differ", title_justify="left")
    differing.add_column("setting")
    for label in comparison.labels:
        differing.add_column(label)
    for key, values in comparison.differing.items():
        differing.add_row(key, *(_setting(value) for value in values))
    if comparison.differing:
        console.print(differing)
    else:
        console.print("settings that differ: none, the runs were set up alike", highlight=False)
    console.print(_curves(comparison))


_FIGURES = ("final_reward_mean", "initial_val_reward_mean", "final_val_reward_mean", "best_val_reward_mean")


def _curves(comparison: RunComparison) -> Table:
    """Each run's training and validation reward by step (at most :data:`CURVE_ROWS` steps, evenly spread)."""
    table = Table(title="reward by step (train / val)", title_justify="left")
    table.add_column("step", justify="right")
    for label in comparison.labels:
        table.add_column(label, justify="right")
    steps = sorted({step for run in comparison.runs for step, _ in (*run.train_curve, *run.val_curve)})
    if len(steps) > CURVE_ROWS:
        steps = sorted({steps[round(i * (len(steps) - 1) / (CURVE_ROWS - 1))] for i in range(CURVE_ROWS)})
    for step in steps:
        table.add_row(f"{step:g}", *(_at(run, step) for run in comparison.runs))
    return table


def _at(run: RunSnapshot, step: float) -> str:
    train = dict(run.train_curve).get(step)
    val = dict(run.val_curve).get(step)
    if train is None and val is None:
        return ""
    return f"{_number(train)} / {_number(val)}"


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def _duration(value: object) -> str:
    if not isinstance(value, int | float):
        return "–"
    return f"{value / 60:.1f} min" if value >= 120 else f"{value:.1f} s"


def _setting(value: object) -> str:
    return "–" if value is None else str(value)
