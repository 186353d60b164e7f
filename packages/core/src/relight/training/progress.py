"""What a run shows while it works, in a terminal and in a log file alike.

On a terminal a batch of rollouts, and asynchronous training's groups, get a live bar. When the
output is not a terminal (a log file, ``nohup``, CI) a live bar shows nothing until it ends, so
:class:`RunProgress` prints a plain line instead, at a steady pace and once more at the end: rollouts
(or groups) done of the total, then what the loop adds (failures and LLM calls per second for a batch;
policy version, rate and drops for asynchronous training) and the time elapsed. Every training step
gets its line either way. Both loops show their progress through here alone.

Other parts of a run add to what is shown through :meth:`RunProgress.note` (a line now) and
:attr:`RunProgress.health` (a short text carried on every progress line and on the bar, such as the
runner processes' health).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from relight.records import Rollout, RolloutStatus

__all__ = ["BatchProgress", "ProgressCount", "RunProgress"]


class RunProgress:
    """Progress of a run on ``console``: a live bar on a terminal, a line every ``every`` seconds elsewhere."""

    def __init__(self, console: Console, *, every: float = 30.0) -> None:
        self.console = console
        self.every = every
        self.health: str | None = None
        """Shown with every progress line and on the bar while set (``"runners 3/4 alive"``)."""

    @property
    def live(self) -> bool:
        """Whether a live bar is shown (the console is an interactive terminal)."""
        return self.console.is_terminal and not self.console.is_dumb_terminal

    @contextmanager
    def batch(self, label: str, total: int, calls: Callable[[], int] = lambda: 0) -> Generator[BatchProgress]:
        """Follow one batch of ``total`` rollouts; ``calls`` counts the LLM calls made so far (for calls/s)."""
        with self.count(label, total, unit="rollouts") as count:
            yield BatchProgress(count, calls)

    @contextmanager
    def count(self, label: str, total: int, *, unit: str) -> Generator[ProgressCount]:
        """Follow ``total`` things (``unit``) done one by one: a live bar, or plain lines now and then and at the end.

        ``label`` names them on the bar and on each line."""
        count = ProgressCount(self, label, total, unit)
        if not self.live:
            yield count
            count.line()
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=True) as bar:
            count.bar = (bar, bar.add_task(label, total=total, info=""))
            yield count

    def step(self, metrics: Mapping[str, float]) -> None:
        """The line of one training step (or validation): every metric, compactly."""
        shown = "  ".join(f"{key}={value:.4g}" for key, value in metrics.items() if key != "step")
        self.console.print(f"[bold]step {int(metrics['step'])}[/]  {shown}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """Print a line now (above the bar on a terminal)."""
        self.console.print(text, highlight=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        self.console.print(f"[bold yellow]warning:[/] {text}", highlight=False, soft_wrap=True)


class ProgressCount:
    """How many of ``total`` are done, shown on the run's bar or, away from a terminal, as a line now and then."""

    def __init__(self, run: RunProgress, label: str, total: int, unit: str) -> None:
        self.run = run
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.info = ""
        self.bar: tuple[Progress, TaskID] | None = None
        self.began = self._last_line = time.monotonic()

    def show(self, done: int, info: str) -> None:
        """``done`` of the total so far, with a short text after the count (rates, failures, health)."""
        self.done, self.info = done, info
        if self.bar is not None:
            bar, task = self.bar
            bar.update(task, completed=done, info=info)
        elif time.monotonic() - self._last_line >= self.run.every:
            self.line()

    def line(self) -> None:
        """Print where the count stands, as one plain line."""
        self._last_line = time.monotonic()
        elapsed = self._last_line - self.began
        self.run.note(f"{self.label}: {self.unit} {self.done}/{self.total}  {self.info}  {elapsed:.0f} s")


class BatchProgress:
    """One batch of rollouts, refreshed by :meth:`update` with the rollouts as they stand."""

    def __init__(self, count: ProgressCount, calls: Callable[[], int]) -> None:
        self.count = count
        self.failed = 0
        self._calls = calls
        self._calls_at_start = calls()

    def update(self, rollouts: Sequence[Rollout]) -> None:
        self.failed = sum(rollout.is_finished and rollout.status is not RolloutStatus.SUCCEEDED for rollout in rollouts)
        self.count.show(sum(rollout.is_finished for rollout in rollouts), self._info())

    def _info(self) -> str:
        elapsed = max(time.monotonic() - self.count.began, 1e-9)
        parts = [f"{self.failed} failed", f"{(self._calls() - self._calls_at_start) / elapsed:.1f} calls/s"]
        if self.count.run.health:
            parts.append(self.count.run.health)
        return "  ".join(parts)
