"""Runners: claim rollouts from the store and run the agent on them, many at once.

A :class:`Runner` keeps up to ``concurrency`` attempts going: async agents as tasks on its loop,
sync agents on threads of its own pool (each with a copy of the context, so spans and rewards made
in the agent are tagged with its attempt). Each attempt's lease is kept alive by heartbeats; the
agent's spans are flushed before the attempt is finished, so a finished attempt's record is whole.
An agent that raises fails its attempt with the traceback, one that runs past ``timeout`` times
out, and the store retries either up to the rollout's ``max_attempts``. A runner that dies (even
by SIGKILL) loses nothing: its leases expire and another runner retries those rollouts.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import math
import multiprocessing
import os
import signal
import socket
import traceback
from collections.abc import Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from typing import Any, cast

from relight import tracing
from relight.agent import LLM, Agent
from relight.batcher import SpanBatcher
from relight.context import attempt_scope
from relight.errors import ConfigError, LeaseLostError
from relight.gateway.sessions import api_key_for
from relight.models import Attempt, AttemptStatus, Mode, Rollout, new_id
from relight.plugins import open_store
from relight.store import DEFAULT_LEASE_SECONDS, Store

__all__ = ["Runner", "RunnerProcesses", "RunnerStats", "llm_for", "run_runner_process"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RunnerStats:
    """What one runner has done so far."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    lost: int = 0
    """Attempts whose lease was lost (expired or taken over) before they finished here."""


def llm_for(gateway_url: str, rollout: Rollout, attempt: Attempt, model: str) -> LLM:
    """The handle that points an agent at the gateway for one attempt."""
    base = gateway_url.rstrip("/")
    return LLM(
        base_url=f"{base}/rollouts/{rollout.rollout_id}/attempts/{attempt.attempt_id}/v1",
        api_key=api_key_for(rollout.rollout_id, attempt.attempt_id),
        model=model,
    )


class Runner:
    """Runs ``agent`` on rollouts claimed from ``store`` until :meth:`stop`.

    Args:
        gateway_url: the gateway's root URL (``http://127.0.0.1:<port>``).
        model: the model name agents are told to use.
        concurrency: attempts running at once.
        lease_seconds: each attempt's lease; heartbeats renew it every third of that.
        timeout: seconds one attempt may run before it is failed as timed out; None for no limit.
        mode: claim only train or only val rollouts; None for both.
        worker_id: how attempts name this runner; host, pid and a random part by default.
    """

    def __init__(
        self,
        agent: Agent,
        store: Store,
        *,
        gateway_url: str,
        model: str,
        concurrency: int = 16,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float | None = None,
        mode: Mode | None = None,
        worker_id: str | None = None,
        claim_wait_seconds: float = 30.0,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        self.agent = agent
        self.store = store
        self.gateway_url = gateway_url
        self.model = model
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.timeout = timeout
        self.mode = mode
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{new_id('w')}"
        self.claim_wait_seconds = claim_wait_seconds
        self.stats = RunnerStats()
        self._stopping = False
        self._claiming: asyncio.Task[tuple[Rollout, Attempt] | None] | None = None
        self._batcher: SpanBatcher | None = None

    async def run(self) -> RunnerStats:
        """Claim and run attempts until :meth:`stop`; returns once the running ones have finished."""
        self._stopping = False
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        self._batcher = SpanBatcher(self.store)
        tracing.install(self._batcher)
        executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="relight-agent")
        try:
            while not self._stopping:
                await slots.acquire()
                claimed = await self._claim()
                if claimed is None:
                    slots.release()
                    continue
                self.stats.claimed += 1
                task = asyncio.create_task(self._attempt(*claimed, executor))
                running.add(task)
                task.add_done_callback(running.discard)
                task.add_done_callback(lambda _task: slots.release())
            await asyncio.gather(*running)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await self._batcher.aclose()
            executor.shutdown(wait=False, cancel_futures=True)
        return self.stats

    def stop(self) -> None:
        """Claim nothing more; :meth:`run` returns when the attempts under way have finished."""
        self._stopping = True
        if self._claiming is not None:
            self._claiming.cancel()

    async def _claim(self) -> tuple[Rollout, Attempt] | None:
        if self._stopping:
            return None
        self._claiming = asyncio.create_task(
            self.store.claim(
                self.worker_id, lease_seconds=self.lease_seconds, timeout=self.claim_wait_seconds, mode=self.mode
            )
        )
        try:
            return await self._claiming
        except asyncio.CancelledError:
            if self._stopping and self._claiming.cancelled():
                return None
            raise
        finally:
            self._claiming = None

    async def _attempt(self, rollout: Rollout, attempt: Attempt, executor: ThreadPoolExecutor) -> None:
        llm = llm_for(self.gateway_url, rollout, attempt, self.model)
        with attempt_scope(rollout.rollout_id, attempt.attempt_id):
            agent_task = asyncio.create_task(self._run_agent(rollout.input, llm, executor))
        lease = asyncio.create_task(self._keep_alive(rollout, attempt, agent_task))
        status, error = AttemptStatus.SUCCEEDED, None
        try:
            await agent_task
        except _TimedOut:
            status, error = AttemptStatus.TIMED_OUT, f"the rollout ran past its timeout of {self.timeout} s"
        except asyncio.CancelledError:
            if not lease.done():  # not cancelled by a lost lease: the runner itself is being cancelled
                raise
        except Exception:
            status, error = AttemptStatus.FAILED, traceback.format_exc()
        finally:
            lease.cancel()
        if lease.done() and not lease.cancelled() and lease.result():
            self._lost(rollout, attempt, "its lease was lost while the agent ran")
            return
        assert self._batcher is not None
        await self._batcher.flush()
        try:
            await self.store.finish_attempt(rollout.rollout_id, attempt.attempt_id, status, error=error)
        except LeaseLostError:
            self._lost(rollout, attempt, "its lease expired before it finished")
            return
        except Exception:
            logger.exception("relight: could not finish attempt %s; its lease will expire", attempt.attempt_id)
            self._lost(rollout, attempt, "the store did not take its outcome")
            return
        self._count(status)
        if error is not None:
            logger.warning(
                "relight: rollout %s attempt %d %s: %s",
                rollout.rollout_id,
                attempt.number,
                status.value,
                error.strip().splitlines()[-1],
            )

    async def _run_agent(self, task: Any, llm: LLM, executor: ThreadPoolExecutor) -> None:
        """Run the agent (async as a coroutine, sync on a thread) and record a returned reward."""
        if self.agent.is_async:
            call = asyncio.ensure_future(cast(Awaitable[Any], self.agent.rollout(task, llm)))
        else:
            context = contextvars.copy_context()
            rollout = functools.partial(self.agent.rollout, task, llm)
            call = asyncio.get_running_loop().run_in_executor(executor, context.run, rollout)
        limit = asyncio.timeout(self.timeout)
        try:
            async with limit:
                result = await call
        except TimeoutError:
            if limit.expired():
                raise _TimedOut from None
            raise
        reward = _reward(result)
        if reward is not None:
            tracing.emit_reward(reward)

    async def _keep_alive(self, rollout: Rollout, attempt: Attempt, agent_task: asyncio.Task[None]) -> bool:
        """Renew the lease until cancelled; on losing it, cancel the agent and return True."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.store.heartbeat(rollout.rollout_id, attempt.attempt_id, lease_seconds=self.lease_seconds)
            except LeaseLostError:
                agent_task.cancel()
                return True
            except Exception:
                logger.exception("relight: heartbeat for rollout %s failed; retrying", rollout.rollout_id)

    def _lost(self, rollout: Rollout, attempt: Attempt, why: str) -> None:
        self.stats.lost += 1
        logger.warning(
            "relight: attempt %s of rollout %s was abandoned: %s", attempt.attempt_id, rollout.rollout_id, why
        )

    def _count(self, status: AttemptStatus) -> None:
        if status is AttemptStatus.SUCCEEDED:
            self.stats.succeeded += 1
        elif status is AttemptStatus.TIMED_OUT:
            self.stats.timed_out += 1
        else:
            self.stats.failed += 1


def run_runner_process(agent: Agent, store_url: str, options: Mapping[str, Any]) -> None:
    """A runner process's main: run ``Runner(agent, open_store(store_url), **options)`` until SIGTERM or SIGINT."""

    async def main() -> None:
        store = open_store(store_url)
        runner = Runner(agent, store, **options)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, runner.stop)
        try:
            await runner.run()
        finally:
            await store.close()

    asyncio.run(main())


class RunnerProcesses:
    """``count`` runner processes sharing the store at ``store_url`` (an HTTP store server).

    The agent travels to each process by pickling (a ``@relight.rollout`` function by its module and
    name), so it must be importable there. Processes start fresh (``spawn``): no state is inherited.

    Args:
        options: keyword arguments of :class:`Runner` (``gateway_url``, ``model``, ``concurrency``, …).
    """

    def __init__(self, count: int, agent: Agent, store_url: str, **options: Any) -> None:
        if count < 1:
            raise ConfigError(f"the number of runner processes must be at least 1, got {count}")
        context = multiprocessing.get_context("spawn")
        self.processes: list[SpawnProcess] = []
        for index in range(count):
            own = dict(options)
            if "worker_id" in own:
                own["worker_id"] = f"{own['worker_id']}-{index}"
            process = context.Process(
                target=run_runner_process, args=(agent, store_url, own), name=f"relight-runner-{index}", daemon=True
            )
            self.processes.append(process)

    def start(self) -> None:
        for process in self.processes:
            process.start()

    def stop(self, *, grace_seconds: float = 30.0) -> None:
        """Ask each process to finish its attempts and exit; kill those still running after ``grace_seconds``."""
        for process in self.processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes:
            process.join(grace_seconds)
            if process.is_alive():
                process.kill()
                process.join()


class _TimedOut(Exception):
    """The attempt ran past the runner's timeout (as opposed to a TimeoutError the agent raised)."""


def _reward(result: object) -> float | None:
    if result is None:
        return None
    if isinstance(result, bool) or not isinstance(result, int | float):
        raise TypeError(
            f"the agent returned {result!r} ({type(result).__name__}); return a float reward, "
            "or None when it emitted its rewards with relight.emit_reward"
        )
    return float(result)
