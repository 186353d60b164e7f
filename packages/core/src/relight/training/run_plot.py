"""The reward curve of a run folder: training reward per step, validation reward where it was measured.

matplotlib is optional for the core (relight-torch brings it): without it :func:`plot_rewards`
raises ImportError and the run folder goes on without a PNG.
"""

# matplotlib's stubs leave **kwargs untyped; nothing here passes any.
# pyright: reportUnknownMemberType=false

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_rewards", "reward_figure"]


def plot_rewards(rows: Sequence[Mapping[str, float | str]], path: Path, *, title: str = "") -> Path:
    """Draw :func:`reward_figure` of ``rows`` into the PNG file ``path``."""
    import matplotlib.pyplot as plt

    figure = reward_figure(rows, title=title)
    partial = path.with_suffix(".png.partial")
    figure.savefig(partial, format="png")  # then renamed: a viewer never opens a half-written file
    plt.close(figure)
    partial.replace(path)
    return path


def reward_figure(rows: Sequence[Mapping[str, float | str]], *, title: str = "") -> Figure:
    """The ``reward_mean`` of train rows and the ``val_reward_mean`` of val rows against ``step``.

    A run with several policies also gets each policy's training reward (``reward/<policy>``: the mean
    reward credited to its calls). A dotted vertical line marks each step a killed run was resumed after
    (``resume`` rows). Steps are whole, and so are the ticks that mark them, on a run of two steps too.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    train = [(row["step"], row["reward_mean"]) for row in rows if row["kind"] == "train" and "reward_mean" in row]
    val = [(row["step"], row["val_reward_mean"]) for row in rows if row["kind"] == "val"]
    resumed = [row["step"] for row in rows if row["kind"] == "resume"]
    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    if train:
        axes.plot([s for s, _ in train], [r for _, r in train], marker=".", label="training reward (mean of rollouts)")
    if val:
        axes.plot([s for s, _ in val], [r for _, r in val], marker="o", linestyle="--", label="validation reward")
    for policy, points in _policy_rewards(rows).items():
        axes.plot([s for s, _ in points], [r for _, r in points], marker=".", alpha=0.8, label=f"policy {policy}")
    for index, step in enumerate(resumed):  # where a killed run was taken up again
        axes.axvline(float(step), color="grey", linestyle=":", label="resumed" if index == 0 else None)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("step")
    axes.set_ylabel("reward")
    axes.set_title(f"relight run {title}".strip())
    axes.grid(alpha=0.3)
    if train or val or resumed:  # the policies' lines come with the training rows
        axes.legend(loc="best")
    figure.tight_layout()
    return figure


def _policy_rewards(rows: Sequence[Mapping[str, float | str]]) -> dict[str, list[tuple[float | str, float | str]]]:
    """Each policy's ``reward/<policy>`` of the train rows that report it, by policy name."""
    curves: dict[str, list[tuple[float | str, float | str]]] = {}
    for row in rows:
        if row["kind"] == "train":
            for key, value in row.items():
                if key.startswith("reward/"):
                    curves.setdefault(key.removeprefix("reward/"), []).append((row["step"], value))
    return curves
