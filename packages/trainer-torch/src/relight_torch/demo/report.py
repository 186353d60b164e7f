"""The demo's reward curve: training reward and tool use per iteration, greedy evaluation before and after."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plot_curves"]


def plot_curves(rows: Sequence[Mapping[str, float]], *, initial: float, final: float, path: Path) -> Path:
    """Write the plot to ``path`` (PNG) and return it."""
    iterations = [row["iteration"] for row in rows]
    figure, axes = plt.subplots(figsize=(7, 4), dpi=120)
    axes.plot(iterations, [row["reward"] for row in rows], label="training reward (sampled)", color="tab:blue")
    axes.plot(iterations, [row["tool_rate"] for row in rows], label="tool use (sampled)", color="tab:orange", alpha=0.7)
    last = iterations[-1] if iterations else 1
    axes.scatter([0, last], [initial, final], color="tab:green", zorder=3, label="greedy eval reward")
    axes.set_xlabel("GRPO iteration")
    axes.set_ylim(-0.02, 1.02)
    axes.set_title("relight demo: calculator agent")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
