"""Runners: claim rollouts from the store and run the agent on them, many at once.

A :class:`Runner` keeps up to ``concurrency`` attempts going, refilling free slots with a few claims
at once (a claim is a round trip to the store): async agents as tasks on its loop,
sync agents on threads of their own (each with a copy of the context, so spans and rewards made
in the agent are tagged with its attempt; a hung one is abandoned, never holding a slot). Before its
agent starts, an attempt reads the resources version its rollout is pinned to from the store (each
version once per runner) and hands it to the agent (``llm.resources``, :func:`relight.resource`): a
version that cannot be read fails the attempt rather than run the agent on its defaults. Each
attempt's lease is kept alive by heartbeats. Before an attempt is finished its spans (the agent's,
and the gateway's, which the runner asks it to end the attempt) must be in the store: if some could
not be written it fails instead of succeeding with a hole. Its rewards (returned or emitted) take a
path of their own, which relight's tracing failing cannot cost them (:mod:`relight.tracing.rewards`):
an attempt succeeds only with every reward it was given in the store. An agent that raises fails its attempt
with the traceback, one that runs past ``timeout`` times out, and the store retries either up to the
rollout's ``max_attempts``. A runner that dies (even by SIGKILL) loses nothing: its leases expire
and another runner retries those rollouts. A store that goes away (a restart, a network fault) only
pauses the claims, which resume when it is back. :meth:`Runner.stop` (SIGTERM in a runner
process) waits ``stop_grace_seconds`` for the running attempts, then fails the rest so they are
retried at once (while their rollouts have attempts left), and returns whatever their agents are doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import os
import socket
import traceback
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict, cast

from relight._internal.http import HttpClient
from relight._internal.retry import RetryPolicy, retry_async
from relight._internal.server import CLIENT_KEEP_ALIVE_SECONDS
from relight.agent import LLM, Agent
from relight.errors import ConfigError, LeaseLostError, NotFoundError, StoreError
from relight.gateway import Gateway, GatewayError
from relight.gateway.sessions import api_key_for
from relight.gateway.urls import attempt_base_url, end_attempt_path
from relight.records import Attempt, AttemptStatus, Mode, Resources, Rollout, new_id
from relight.resources.reading import AttemptResources, resources_scope
from relight.runners._threads import AgentThreads
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.tracing import otel as tracing
from relight.tracing import request_role
from relight.tracing.batcher import SpanBatcher
from relight.tracing.context import AttemptRef, attempt_scope
from relight.tracing.hook_failures import hook_failed
from relight.tracing.rewards import AttemptRewards, reward_span

_CLAIMS_AT_ONCE = 4
"""Claims a runner has under way at once (never more than its free slots): a claim is a round trip to a
store that may be busy, and one at a time would refill free slots no faster than that."""
_RESOURCES_KEPT = 32
"""Resources versions a runner keeps read (a version never changes); a run's rollouts use one or a few at a time."""

_STOPPED = "the runner stopped before the attempt ended"
"""Why an attempt the runner stopped failed; not logged by a runner stopped with no grace (its caller says it)."""

__all__ = ["Runner", "RunnerOptions", "RunnerStats", "is_worker_of", "llm_for"]

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
    abandoned_threads: int = 0
    """Threads of sync agents that timed out or were stopped and still run (a thread cannot be killed)."""
    store_outages: int = 0
    """Times the claim loop found the store unreachable and waited for it to come back."""


class RunnerOptions(TypedDict):
    """:class:`Runner`'s keyword arguments, as they travel to runners started elsewhere (processes, Ray actors).

    The trainer's services and ``relight runner`` hand these to :class:`~relight.runners.processes.RunnerProcesses`
    and :class:`~relight.runners.remote.RemoteRunners`, which make each runner with them; see :class:`Runner`.
    """

    gateway_url: str
    model: str
    concurrency: NotRequired[int]
    lease_seconds: NotRequired[float]
    timeout: NotRequired[float | None]
    mode: NotRequired[Mode | None]
    worker_id: NotRequired[str | None]
    claim_wait_seconds: NotRequired[float]
    heartbeat_seconds: NotRequired[float | None]
    stop_grace_seconds: NotRequired[float]


def llm_for(gateway_url: str, rollout: Rollout, attempt: Attempt, model: str) -> LLM:
    """The handle that points an agent at the gateway for one attempt."""
    return LLM(
        base_url=attempt_base_url(gateway_url, rollout.rollout_id, attempt.attempt_id),
        api_key=api_key_for(rollout.rollout_id, attempt.attempt_id),
        model=model,
    )


class Runner:
    """Runs ``agent`` on rollouts claimed from ``store`` until :meth:`stop`.

    Args:
        gateway_url: the gateway's root URL (``http://127.0.0.1:<port>``).
        model: the model name agents are told to use.
        concurrency: attempts running at once.
        lease_seconds: each attempt's lease; heartbeats renew it every ``heartbeat_seconds``.
        heartbeat_seconds: how often leases are renewed; a third of ``lease_seconds`` by default.
        timeout: seconds one attempt may run before it is failed as timed out; None for no limit.
        stop_grace_seconds: how long :meth:`stop` lets running attempts finish before failing them; 0 fails them
            at once and says nothing of it (dev mode, interrupted, reports it itself).
        mode: claim only train or only val rollouts; None for both.
        worker_id: how attempts name this runner; host, pid and a random part by default.
        gateway: the gateway itself, when it runs in this process (the trainer's with one runner):
            attempts then end at it by a call rather than by a request to ``gateway_url``, which
            cost an HTTP round trip through both clients per rollout.
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
        heartbeat_seconds: float | None = None,
        stop_grace_seconds: float = 20.0,
        gateway: Gateway | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        heartbeat_seconds = lease_seconds / 3 if heartbeat_seconds is None else heartbeat_seconds
        if not (math.isfinite(lease_seconds) and lease_seconds > 0):
            raise ConfigError(f"lease_seconds must be a positive number of seconds, got {lease_seconds!r}")
        if not (math.isfinite(heartbeat_seconds) and 0 < heartbeat_seconds < lease_seconds):
            raise ConfigError(
                f"heartbeat_seconds must be positive and below lease_seconds ({lease_seconds}), "
                f"got {heartbeat_seconds!r}"
            )
        if not (math.isfinite(stop_grace_seconds) and stop_grace_seconds >= 0):
            raise ConfigError(f"stop_grace_seconds must be a number of seconds >= 0, got {stop_grace_seconds!r}")
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
        self.heartbeat_seconds = heartbeat_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.gateway = gateway
        self.retry = RetryPolicy()
        self.stats = RunnerStats()
        self._stopping = False
        self._stopped = asyncio.Event()
        self._claims: set[asyncio.Task[tuple[Rollout, Attempt] | None]] = set()
        self._outage = 0
        """Claims failed in a row because the store could not be reached."""
        self._batcher: SpanBatcher | None = None
        self._threads = AgentThreads()
        self._agents: set[asyncio.Task[None]] = set()
        self._http: HttpClient | None = None  # to the gateway at gateway_url
        self._resources: OrderedDict[int, Resources] = OrderedDict()

    async def run(self) -> RunnerStats:
        """Claim and run attempts until :meth:`stop`; returns once the running ones have finished (or been failed)."""
        self._stopping = False
        self._stopped = asyncio.Event()
        self._outage = 0
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        self._batcher = SpanBatcher(self.store)
        self._http = HttpClient(self.gateway_url, timeout=60, keep_alive=CLIENT_KEEP_ALIVE_SECONDS)
        tracing.install(self._batcher)
        request_role.install(self.gateway_url)  # the agent's requests name their call's role to the gateway
        claimers = [asyncio.create_task(self._claim_loop(slots, running)) for _ in range(_CLAIMS_AT_ONCE)]
        try:
            await asyncio.gather(*claimers)
            await self._wind_down(running)
        finally:
            for claimer in claimers:
                claimer.cancel()
            await asyncio.gather(*claimers, return_exceptions=True)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            tracing.uninstall(self._batcher)
            await self._batcher.aclose()
            await self._http.aclose()
            request_role.uninstall(self.gateway_url)
            self.stats.abandoned_threads = self._threads.abandoned
        return self.stats

    def stop(self) -> None:
        """Claim nothing more; :meth:`run` returns when the attempts under way have finished, or within
        ``stop_grace_seconds`` (plus the time to report them) by failing those still running."""
        self._stopping = True
        self._stopped.set()
        for claiming in self._claims:
            claiming.cancel()

    async def _claim_loop(self, slots: asyncio.Semaphore, running: set[asyncio.Task[None]]) -> None:
        """Claim into free slots and start their attempts, until the runner stops (one of several at once)."""
        while await self._free_slot(slots):
            try:
                claimed = await self._claim()
            except StoreError as error:
                slots.release()
                await self._wait_out(error)
                continue
            if self._outage:
                logger.warning("relight: the store is reachable again; runner %s claims again", self.worker_id)
                self._outage = 0
            if claimed is None:
                slots.release()
                continue
            self.stats.claimed += 1
            task = asyncio.create_task(self._attempt(*claimed))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda _task: slots.release())

    async def _free_slot(self, slots: asyncio.Semaphore) -> bool:
        """Wait for a free slot; False once the runner is stopping (also while every slot is busy with a hung agent)."""
        if self._stopping:
            return False
        acquiring = asyncio.ensure_future(slots.acquire())
        stopping = asyncio.ensure_future(self._stopped.wait())
        await asyncio.wait((acquiring, stopping), return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        acquiring.cancel()
        got = acquiring.done() and not acquiring.cancelled()
        if got and self._stopping:
            slots.release()
        return got and not self._stopping

    async def _wait_out(self, error: StoreError) -> None:
        """Back off after a failed claim (the store is away), the longer the more claims of this outage failed."""
        if not self._outage:
            self.stats.store_outages += 1
            logger.warning(
                "relight: runner %s cannot reach the store (%s); claiming again when it is back", self.worker_id, error
            )
        self._outage += 1
        delay = self.retry.delay(min(self._outage - 1, 16)) + self.retry.base_seconds
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), delay)

    async def _wind_down(self, running: set[asyncio.Task[None]]) -> None:
        """Let running attempts finish for ``stop_grace_seconds``, then stop their agents (their attempts fail)."""
        if not running:
            return
        _done, pending = await asyncio.wait(set(running), timeout=self.stop_grace_seconds)
        if pending:
            if self.stop_grace_seconds > 0:  # a stop with no grace at all is an interruption its caller reports
                logger.warning(
                    "relight: runner %s stopping: %d attempt(s) still running after %.3g s are failed "
                    "(the store tries a rollout again while it has attempts left)",
                    self.worker_id,
                    len(pending),
                    self.stop_grace_seconds,
                )
            for agent in list(self._agents):
                agent.cancel()
            await asyncio.wait(pending)

    async def _claim(self) -> tuple[Rollout, Attempt] | None:
        if self._stopping:
            return None
        claiming = asyncio.create_task(
            self.store.claim(
                self.worker_id, lease_seconds=self.lease_seconds, timeout=self.claim_wait_seconds, mode=self.mode
            )
        )
        self._claims.add(claiming)
        try:
            return await claiming
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # stop() cancelled the claim: claim no more. A cancel of the runner itself that landed on the
            # claim (a second SIGTERM right after the first) must go on up, or it would be swallowed here.
            if self._stopping and claiming.cancelled() and not (current and current.cancelling()):
                return None
            raise
        finally:
            self._claims.discard(claiming)

    async def _attempt(self, rollout: Rollout, attempt: Attempt) -> None:
        assert self._batcher is not None
        # This attempt's spans go to this runner's batcher, whichever runner of the process started last.
        with tracing.route_attempt(rollout.rollout_id, attempt.attempt_id, self._batcher):
            await self._run_attempt(rollout, attempt)

    async def _run_attempt(self, rollout: Rollout, attempt: Attempt) -> None:
        llm = llm_for(self.gateway_url, rollout, attempt, self.model)
        ref = AttemptRef(rollout.rollout_id, attempt.attempt_id)
        rewards = AttemptRewards(ref, self._batcher)
        with attempt_scope(ref.rollout_id, ref.attempt_id), rewards.scope():
            agent_task = asyncio.create_task(self._run_agent(rollout, llm, rewards))
        self._agents.add(agent_task)
        agent_task.add_done_callback(self._agents.discard)
        lease = asyncio.create_task(self._keep_alive(rollout, attempt, agent_task))
        status, error = AttemptStatus.SUCCEEDED, None
        try:
            await agent_task
        except _TimedOut:
            status, error = AttemptStatus.TIMED_OUT, f"the rollout ran past its timeout of {self.timeout} s"
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # the runner itself is being cancelled
                raise
            status, error = AttemptStatus.FAILED, _STOPPED
        except Exception:
            status, error = AttemptStatus.FAILED, traceback.format_exc()
        finally:
            lease.cancel()
        self.stats.abandoned_threads = self._threads.abandoned
        unrecorded = await self._close_record(rollout, attempt, rewards)
        if lease.done() and not lease.cancelled() and lease.result():
            self._lost(rollout, attempt, "its lease was lost while the agent ran")
            return
        if unrecorded is not None and status is AttemptStatus.SUCCEEDED:
            status, error = AttemptStatus.FAILED, unrecorded
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
        if error is not None and not (error == _STOPPED and self.stop_grace_seconds == 0):
            logger.warning(
                "relight: rollout %s attempt %d %s: %s",
                rollout.rollout_id,
                attempt.number,
                status.value,
                error.strip().splitlines()[-1],
            )

    async def _close_record(self, rollout: Rollout, attempt: Attempt, rewards: AttemptRewards) -> str | None:
        """End the attempt at the gateway and wait for all its spans: None when all are in the store, else why not.

        Its rewards are in the store once this returns None, whatever failed in relight's tracing on the way
        (:mod:`relight.tracing.rewards`).
        """
        assert self._batcher is not None
        lost: list[str] = []
        try:
            await self._batcher.flush_attempt(rollout.rollout_id, attempt.attempt_id)
        except StoreError as error:
            lost.append(str(error))
        except Exception as error:  # a bug in the batcher: what it held may never be written
            hook_failed("SpanBatcher.flush_attempt")
            lost.append(f"relight's span batcher failed: {error!r}")
        unrewarded = [why for why in (rewards.failure(), await rewards.store_unsent(self.store)) if why is not None]
        end = self._end_here if self.gateway is not None else self._end_by_request
        problem = await end(rollout, attempt)
        if problem is not None:
            lost.append(problem)
        problems = [f"the attempt's spans are not all in the store: {'; '.join(lost)}"] if lost else []
        return "; ".join(problems + unrewarded) or None

    async def _end_here(self, rollout: Rollout, attempt: Attempt) -> str | None:
        """End the attempt at the gateway of this process; why its spans may not all be in the store, if so."""
        assert self.gateway is not None
        try:
            await self.gateway.end_attempt(AttemptRef(rollout.rollout_id, attempt.attempt_id))
        except GatewayError as error:
            return f"the gateway answered {error.status_code}: {error.message}"
        except Exception as error:  # a bug in the gateway's recording: its spans may not all be in the store
            hook_failed("Gateway.end_attempt")
            return f"the gateway could not end the attempt: {error!r}"
        return None

    async def _end_by_request(self, rollout: Rollout, attempt: Attempt) -> str | None:
        """End the attempt by ``POST …/relight/end`` (retried while the gateway cannot be reached)."""
        assert self._http is not None
        http = self._http
        path = end_attempt_path(rollout.rollout_id, attempt.attempt_id)

        async def end() -> tuple[int, bytes]:
            response = await http.request("POST", path)
            return response.status, await response.read()

        try:
            status, reply = await retry_async(
                end,
                policy=self.retry,
                transient=lambda e: isinstance(e, OSError),
                what=f"POST {self.gateway_url}{path}",
            )
        except OSError as error:  # refused, dropped or past the timeout (TimeoutError)
            return f"could not reach the gateway at {self.gateway_url}: {error!r}"
        if status != 200:
            return f"the gateway answered {status}: {reply[:300].decode(errors='replace')}"
        return None

    async def _run_agent(self, rollout: Rollout, llm: LLM, rewards: AttemptRewards) -> None:
        """Run the agent (async as a coroutine, sync on a thread of its own) with its rollout's resources, and
        record a returned reward."""
        resources = AttemptResources(
            await self._resources_of(rollout.resources_version), rollout.resources_version, rewards.ref
        )
        llm, task = replace(llm, resources=resources), rollout.input
        with resources_scope(resources):  # the agent's coroutine or thread takes a copy of this context
            if self.agent.is_async:
                call = asyncio.ensure_future(cast(Awaitable[Any], self.agent.rollout(task, llm)))
            else:
                context = contextvars.copy_context()
                run = functools.partial(self.agent.rollout, task, llm)
                call = self._threads.run(lambda: context.run(run))
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
            try:
                rewards.add(reward_span(rewards.ref, reward))
            except Exception as error:  # the attempt fails for it, with the reason: never succeeds without it
                hook_failed("recording the returned reward")
                rewards.failed(f"the reward {reward!r} the agent returned could not be recorded: {error!r}")

    async def _resources_of(self, version: int | None) -> dict[str, Any]:
        """The items of resources version ``version`` (none for None), read from the store once per version."""
        if version is None:
            return {}
        found = self._resources.get(version)
        if found is None:
            try:
                found = self._resources[version] = await self.store.get_resources(version)
            except NotFoundError as error:
                raise NotFoundError(
                    f"the rollout is pinned to resources version {version}, which the store does not hold: {error}"
                ) from error
            while len(self._resources) > _RESOURCES_KEPT:
                self._resources.popitem(last=False)
        self._resources.move_to_end(version)
        return found.items

    async def _keep_alive(self, rollout: Rollout, attempt: Attempt, agent_task: asyncio.Task[None]) -> bool:
        """Renew the lease until cancelled; on losing it, cancel the agent and return True."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
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


def is_worker_of(worker_id: str, pid: int) -> bool:
    """Whether ``worker_id`` is the default id of a runner in process ``pid`` (``host-<pid>-w-…``)."""
    return f"-{pid}-w-" in worker_id


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
