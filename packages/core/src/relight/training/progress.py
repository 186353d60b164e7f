"""What a run shows while it works, in a terminal and in a log file alike.

On a terminal a batch of rollouts gets a live bar. When the output is not a terminal (a log file,
``nohup``, CI) a live bar shows nothing until it ends, so :class:`RunProgress` prints a plain line
instead, at a steady pace: rollouts done of the total, failures, LLM calls per second and the time
elapsed. Every training step gets its line either way.

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

__all__ = ["BatchProgress", "RunProgress"]


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
        tracker = BatchProgress(self, label, total, calls)
        if not self.live:
            yield tracker
            tracker.line()
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=True) as bar:
            tracker.bar = (bar, bar.add_task(label, total=total, info=""))
            yield tracker

    def step(self, metrics: Mapping[str, float]) -> None:
        """The line of one training step (or validation): every metric, compactly."""
        shown = "  ".join(f"{key}={value:.4g}" for key, value in metrics.items() if key != "step")
        self.console.print(f"[bold]step {int(metrics['step'])}[/]  {shown}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """Print a line now (above the bar on a terminal)."""
        self.console.print(text, highlight=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        self.console.print(f"[bold yellow]warning:[/] {text}", highlight=False, soft_wrap=True)


class BatchProgress:
    """One batch's counters, refreshed by :meth:`update` with the rollouts as they stand."""

    def __init__(self, run: RunProgress, label: str, total: int, calls: Callable[[], int]) -> None:
        self.run = run
        self.label = label
        self.total = total
        self.done = 0
        self.failed = 0
        self.bar: tuple[Progress, TaskID] | None = None
        self._calls = calls
        self._calls_at_start = calls()
        self._began = self._last_line = time.monotonic()

    def update(self, rollouts: Sequence[Rollout]) -> None:
        self.done = sum(rollout.is_finished for rollout in rollouts)
        self.failed = sum(rollout.is_finished and rollout.status is not RolloutStatus.SUCCEEDED for rollout in rollouts)
        if self.bar is not None:
            bar, task = self.bar
            bar.update(task, completed=self.done, info=self._info())
        elif time.monotonic() - self._last_line >= self.run.every:
            self.line()

    def line(self) -> None:
        """Print where the batch stands, as one plain line."""
        self._last_line = time.monotonic()
        elapsed = self._last_line - self._began
        self.run.note(f"{self.label}: rollouts {self.done}/{self.total}  {self._info()}  {elapsed:.0f} s")

    def _info(self) -> str:
        elapsed = max(time.monotonic() - self._began, 1e-9)
        parts = [f"{self.failed} failed", f"{(self._calls() - self._calls_at_start) / elapsed:.1f} calls/s"]
        if self.run.health:
            parts.append(self.run.health)
        return "  ".join(parts)
