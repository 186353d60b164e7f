"""The run folder's reward curve marks whole steps only, on a short run too."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib", reason="the reward curve needs matplotlib (relight[plot])")

from relight.training.run_plot import reward_figure


@pytest.mark.parametrize("steps", [1, 2, 3, 7])
def test_a_short_runs_step_ticks_are_whole_numbers(steps: int) -> None:
    rows: list[dict[str, float | str]] = [
        {"kind": "train", "step": step, "reward_mean": 0.1 * step} for step in range(1, steps + 1)
    ]
    rows += [{"kind": "val", "step": 0, "val_reward_mean": 0.0}, {"kind": "val", "step": steps, "val_reward_mean": 0.5}]
    (axes,) = reward_figure(rows).axes
    low, high = axes.get_xlim()
    shown = [tick for tick in axes.get_xticks() if low <= tick <= high]
    assert shown, "no tick on the step axis"
    assert all(tick == int(tick) for tick in shown), shown
