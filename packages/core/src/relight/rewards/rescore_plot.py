"""A rescore's picture: the reward distribution before and after, and each rollout's move.

matplotlib is optional for the core (the ``plot`` extra; relight-torch brings it): without it
:func:`plot_rescore` raises :class:`relight.ConfigError` saying what to install.
"""

# matplotlib's stubs leave **kwargs untyped.
# pyright: reportUnknownMemberType=false

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from typing import Any

from relight.errors import ConfigError
from relight.rewards.rescore import RescoreReport, bins

__all__ = ["plot_rescore"]


def plot_rescore(report: RescoreReport, path: str | Path) -> Path:
    """Left: histograms of the rewards before and after. Right: each rollout's advantage in its group before
    against after, the rollouts whose advantage flips sign marked (equal points drawn once, sized by count)."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError as error:
        raise ConfigError("the rescore plot needs matplotlib: pip install 'relight[plot]'") from error
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    before = [r.before or 0.0 for r in report.rollouts]
    after = [r.after for r in report.rollouts if r.after is not None]
    figure, (histogram, moves) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    edges = bins([*before, *after], count=12)
    if edges:
        histogram.hist(before, bins=edges, alpha=0.55, label="before (recorded)")
        histogram.hist(after, bins=edges, alpha=0.55, label=f"after ({report.name})")
        histogram.legend(loc="best", fontsize="small")
    histogram.set_title("reward distribution")
    histogram.set_xlabel("reward")
    histogram.set_ylabel("rollouts")
    _advantages(moves, report)
    counts = report.counts()
    figure.suptitle(
        f"relight rescore {report.name}: groups gaining signal {counts['gained']}, losing it {counts['lost']}"
    )
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    figure.savefig(partial, format="png")
    plt.close(figure)
    partial.replace(target)
    return target


def _advantages(axes: Any, report: RescoreReport) -> None:
    points: Counter[tuple[float, float, bool]] = Counter(
        (round(r.advantage_before, 3), round(r.advantage_after, 3), r.flipped)
        for r in report.rollouts
        if r.advantage_after is not None
    )
    for flipped, colour, label in ((False, "#2563eb", "keeps its sign"), (True, "#dc2626", "flips sign")):
        drawn = [(x, y, n) for (x, y, f), n in points.items() if f is flipped]
        total = sum(n for _, _, n in drawn)
        axes.scatter(
            [x for x, _, _ in drawn],
            [y for _, y, _ in drawn],
            s=[24 + 14 * n for _, _, n in drawn],
            alpha=0.7,
            color=colour,
            label=f"advantage {label} ({total})",
        )
        for x, y, n in drawn:
            if n > 1:
                axes.annotate(f"×{n}", (x, y), textcoords="offset points", xytext=(7, 5), fontsize="x-small")
    axes.axhline(0, color="grey", linewidth=0.8)
    axes.axvline(0, color="grey", linewidth=0.8)
    axes.set_title("each rollout's advantage in its group (GRPO)")
    axes.set_xlabel("before")
    axes.set_ylabel("after")
    if points:
        axes.legend(loc="best", fontsize="small")
