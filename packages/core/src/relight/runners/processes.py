"""Runner processes on this machine: :class:`relight.Runner` in fresh processes sharing one store over HTTP.

The trainer starts them for ``n_runners > 1`` (or ``runner_process=True``) and
:class:`relight.runners.supervisor.RunnerSupervisor` restarts those that die.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from multiprocessing.context import SpawnProcess
from typing import Unpack

from relight._internal import event_loop
from relight.agent import Agent
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.runners.runner import Runner, RunnerOptions

__all__ = ["RunnerProcesses", "run_runner_process"]


def run_runner_process(agent: Agent, store_url: str, options: RunnerOptions) -> None:
    """A runner process's main: run ``Runner(agent, open_store(store_url), **options)`` until SIGTERM or SIGINT."""

    async def main() -> None:
        store = open_store(store_url)
        runner = Runner(agent, store, **options)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, runner.stop)
        _stop_with_parent(loop, runner)
        try:
            await runner.run()
        finally:
            await store.close()

    event_loop.run(main())


ORPHAN_GRACE_SECONDS = 10.0
"""How long a runner whose trainer died may take to report its attempts before it exits anyway."""


def _stop_with_parent(loop: asyncio.AbstractEventLoop, runner: Runner) -> None:
    """Stop the runner when the process that started it dies (a trainer killed with SIGKILL sends no SIGTERM).

    The parent's sentinel becomes readable when it exits: no polling. The store and gateway of a
    trainer that died are gone too, so the runner is given a few seconds and then exits: its attempts
    are retried by the store when their leases expire (a resumed trainer's runners take them up).
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def orphaned() -> None:
        loop.remove_reader(parent.sentinel)
        runner.stop()
        loop.call_later(ORPHAN_GRACE_SECONDS, os._exit, 1)

    loop.add_reader(parent.sentinel, orphaned)


class RunnerProcesses:
    """``count`` runner processes sharing the store at ``store_url`` (an HTTP store server).

    The agent travels to each process by pickling (a ``@relight.rollout`` function by its module and
    name), so it must be importable there. Processes start fresh (``spawn``): no state is inherited.
    :meth:`restart` replaces one that died (see :class:`relight.runners.supervisor.RunnerSupervisor`).

    Args:
        options: keyword arguments of :class:`Runner` (``gateway_url``, ``model``, ``concurrency``, …).
    """

    def __init__(self, count: int, agent: Agent, store_url: str, **options: Unpack[RunnerOptions]) -> None:
        if count < 1:
            raise ConfigError(f"the number of runner processes must be at least 1, got {count}")
        self._context = multiprocessing.get_context("spawn")
        self._agent = agent
        self._store_url = store_url
        self._options = options
        self.processes: list[SpawnProcess] = [self._process(index) for index in range(count)]

    def _process(self, index: int) -> SpawnProcess:
        own = RunnerOptions(**self._options)
        if "worker_id" in own:
            own["worker_id"] = f"{own['worker_id']}-{index}"
        return self._context.Process(
            target=run_runner_process,
            args=(self._agent, self._store_url, own),
            name=f"relight-runner-{index}",
            daemon=True,
        )

    def start(self) -> None:
        for process in self.processes:
            process.start()

    def restart(self, index: int) -> SpawnProcess:
        """Start a fresh process in place of process ``index`` (which has exited)."""
        process = self._process(index)
        process.start()
        self.processes[index] = process
        return process

    def stop(self, *, grace_seconds: float = 30.0) -> None:
        """Ask each process to finish its attempts and exit; kill those still running after ``grace_seconds``."""
        for process in self.processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes:
            if process.pid is None:
                continue
            process.join(grace_seconds)
            if process.is_alive():
                process.kill()
                process.join()
