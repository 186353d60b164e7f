"""Watching runner processes: a dead one is replaced, its attempts retried at once, and a run that has
no runner left fails with a clear error instead of waiting for ever.

:class:`RunnerSupervisor` wakes when a process exits (its sentinel becomes readable: no polling).
Each death is logged; the rollouts its attempts held are failed in the store right away (so they are
retried now rather than after their lease runs out) and the process is started again, up to
``max_restarts`` times over the run. Once every process is dead with no restart left,
:meth:`RunnerSupervisor.check` raises :class:`RunnersDiedError`. :meth:`RunnerSupervisor.health`
is a short line for progress output (``runners 2/2 alive, 1 restarted``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from relight.errors import ConfigError, InvalidStateError, NotFoundError, RelightError
from relight.records import AttemptStatus, RolloutStatus
from relight.runners.processes import RunnerProcesses
from relight.runners.runner import is_worker_of
from relight.store import Store

__all__ = ["RunnerSupervisor", "RunnersDiedError"]

logger = logging.getLogger(__name__)


class RunnersDiedError(RelightError):
    """Every runner process has died and the restart budget is spent: nothing can run the rollouts."""


@dataclass(slots=True)
class _Deaths:
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list[int])


class RunnerSupervisor:
    """Restarts dead processes of ``processes`` (at most ``max_restarts`` in all) while :meth:`watching`."""

    def __init__(self, processes: RunnerProcesses, store: Store, *, max_restarts: int = 3) -> None:
        if max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {max_restarts}")
        self.processes = processes
        self.store = store
        self.max_restarts = max_restarts
        self._deaths = _Deaths()
        self._stopping = False
        self._failure: RunnersDiedError | None = None
        self._task: asyncio.Task[None] | None = None
        self._given_up: set[int] = set()
        """Slots whose process died once the restart budget was spent: not watched any more."""

    @property
    def restarts(self) -> int:
        return self._deaths.restarts

    @property
    def alive(self) -> int:
        return sum(process.is_alive() for process in self.processes.processes)

    def health(self) -> str:
        """One line on the runner processes, for progress output."""
        line = f"runners {self.alive}/{len(self.processes.processes)} alive"
        if self._deaths.restarts:
            line += f", {self._deaths.restarts} restarted"
        return line

    def check(self) -> None:
        """Raise RunnersDiedError once no runner process is left to run rollouts."""
        if self._failure is not None:
            raise self._failure

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="relight-runner-supervisor")

    async def stop(self) -> None:
        """Stop watching (before the processes are stopped on purpose)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            exited: asyncio.Future[int] = loop.create_future()
            sentinels = {
                process.sentinel: index
                for index, process in enumerate(self.processes.processes)
                if index not in self._given_up
            }
            for sentinel, index in sentinels.items():
                loop.add_reader(sentinel, _settle, exited, index)
            try:
                index = await exited
            finally:
                for sentinel in sentinels:
                    loop.remove_reader(sentinel)
            await self._replace(index)

    async def _replace(self, index: int) -> None:
        process = self.processes.processes[index]
        process.join()
        code = process.exitcode if process.exitcode is not None else -1
        self._deaths.exit_codes.append(code)
        logger.warning("relight: runner process %s (pid %s) died with exit code %s", process.name, process.pid, code)
        if process.pid is not None:
            await self._fail_attempts_of(process.pid)
        if self._deaths.restarts < self.max_restarts:
            self._deaths.restarts += 1
            fresh = self.processes.restart(index)
            logger.warning(
                "relight: restarted runner process %s as pid %s (restart %d of %d)",
                fresh.name,
                fresh.pid,
                self._deaths.restarts,
                self.max_restarts,
            )
            return
        self._given_up.add(index)
        if len(self._given_up) == len(self.processes.processes):
            codes = ", ".join(map(str, self._deaths.exit_codes))
            self._failure = RunnersDiedError(
                f"all {len(self.processes.processes)} runner processes died (exit codes {codes}) and the "
                f"{self.max_restarts} restart(s) allowed are spent; see the log above for why they died "
                "(Trainer(max_runner_restarts=...) allows more)"
            )
            logger.error("relight: %s", self._failure)
            self._stopping = True
        else:
            logger.warning("relight: runner process %s is not restarted: the restart budget is spent", process.name)

    async def _fail_attempts_of(self, pid: int) -> None:
        """Fail the dead process's running attempts now, so their rollouts are retried without waiting for the lease."""
        try:
            running = await self.store.list_rollouts(status=RolloutStatus.RUNNING)
            for rollout in running:
                for attempt in await self.store.list_attempts(rollout.rollout_id):
                    if attempt.status is AttemptStatus.RUNNING and is_worker_of(attempt.worker_id, pid):
                        await self.store.finish_attempt(
                            rollout.rollout_id,
                            attempt.attempt_id,
                            AttemptStatus.FAILED,
                            error=f"its runner process (pid {pid}) died",
                        )
        except (InvalidStateError, NotFoundError):  # ended meanwhile: nothing to do
            pass
        except RelightError:
            logger.exception("relight: could not fail the attempts of dead runner %s; their leases will expire", pid)


def _settle(future: asyncio.Future[int], index: int) -> None:
    if not future.done():
        future.set_result(index)
