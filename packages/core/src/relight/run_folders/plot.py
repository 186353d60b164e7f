"""Runs' reward curves overlaid in one PNG: ``relight compare``'s plot for a terminal user.

matplotlib is optional for the core (the ``plot`` extra; relight-torch brings it): without it
:func:`plot_comparison` raises :class:`relight.ConfigError` saying what to install.
"""

# matplotlib's stubs leave **kwargs untyped.
# pyright: reportUnknownMemberType=false

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from relight.errors import ConfigError
from relight.run_folders.compare import RunComparison

__all__ = ["plot_comparison"]


def plot_comparison(comparison: RunComparison, path: str | Path) -> Path:
    """Training reward (left) and validation reward (right) of every run against the step, one colour per run.

    A run still going is drawn as far as it got, and marked so in the legend.
    """
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError as error:
        raise ConfigError("the comparison plot needs matplotlib: pip install 'relight[plot]'") from error
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    figure, (train_axes, val_axes) = plt.subplots(1, 2, figsize=(11, 4), dpi=110, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, run) in enumerate(zip(comparison.labels, comparison.runs, strict=True)):
        colour = colours[index % len(colours)]
        name = label if run.summary is not None else f"{label} (running)"
        if train := run.train_curve:
            train_axes.plot([s for s, _ in train], [r for _, r in train], marker=".", color=colour, label=name)
        if val := run.val_curve:
            val_axes.plot(
                [s for s, _ in val], [r for _, r in val], marker="o", linestyle="--", color=colour, label=name
            )
    ticker: Any = importlib.import_module("matplotlib.ticker")
    for axes, title in ((train_axes, "training reward (mean of rollouts)"), (val_axes, "validation reward")):
        axes.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))  # steps are whole
        axes.set_title(title)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        if axes.get_lines():
            axes.legend(loc="best", fontsize="small")
    train_axes.set_ylabel("reward")
    figure.suptitle(f"relight: {len(comparison.runs)} run(s) compared")
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    figure.savefig(partial, format="png")  # then renamed: a viewer never opens a half-written file
    plt.close(figure)
    partial.replace(target)
    return target
