"""The trainer: runs an agent's rollouts through the gateway and, given an algorithm, trains on them.

``Trainer().dev(agent, tasks, base_url=..., model=...)`` checks the wiring against any
OpenAI-compatible endpoint: it runs each task once and prints a table of rewards, calls and errors.

``Trainer(algorithm=...).fit(agent, train, val)`` trains. Each step enqueues ``batch_size`` tasks
``n_samples`` times each (the samples of a task share a group, for GRPO), waits for them, turns them
into transitions (:class:`relight.transitions.TransitionBuilder`) and hands those to
``algorithm.update`` while the gateway is paused, then publishes the new policy version: the loop of
:mod:`relight.synchronous`, or of :mod:`relight.asynchronous` with ``max_staleness``. The trainer sets
up the store, gateway and runners both loops work on, and lends them publishing, checkpoints and
validation, which runs before training, every ``val_every`` steps and at the end.

Every ``fit`` writes a run folder (``run_dir``, ``runs/<date>-<time>`` by default; see
:mod:`relight.runfolder`): metrics, summary, reward curve, checkpoints and, by default, the store.
Progress shows as a live bar on a terminal and as plain lines in a log (:mod:`relight.progress`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from pydantic import JsonValue
from rich.console import Console

from relight import _loop
from relight._server import AsgiServer
from relight.agent import Agent
from relight.algorithm import Algorithm, UpstreamTarget
from relight.asynchronous import AsyncOptions, AsyncTraining
from relight.devreport import DevResult, dev_result, dev_table
from relight.errors import ConfigError
from relight.gateway import Gateway, OpenAIUpstream, Retokenizer, Upstream
from relight.models import Mode, Resources, Rollout, RolloutRequest, RolloutStatus
from relight.plugins import open_store
from relight.progress import RunProgress
from relight.rewards.group import GroupReward, GroupRewards
from relight.rolecheck import RoleCheck
from relight.runfolder import RunFolder, default_run_dir
from relight.runner import Runner
from relight.runner_groups import RunnerGroup
from relight.runner_processes import RunnerProcesses
from relight.steps import LoopHooks, TrainingLoop
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.supervisor import RunnerSupervisor
from relight.synchronous import SyncOptions, SyncTraining
from relight.transitions import TransitionBuilder, episode_return, last_attempt_spans

__all__ = ["DevResult", "GatewayOptions", "Trainer"]


class GatewayOptions(TypedDict, total=False):
    """How the trainer's gateway is set up (see :class:`relight.gateway.Gateway`)."""

    host: str
    port: int
    retokenizer: Retokenizer
    max_body_bytes: int


@dataclass(frozen=True, slots=True)
class _Loop:
    store: Store
    gateway: Gateway
    supervisor: RunnerSupervisor | None = None


class Trainer:
    """Runs rollouts of an agent and trains its policy with ``algorithm``.

    Args:
        algorithm: what serves and trains the policy; only :meth:`fit` needs one.
        store: a store, or a URL for :func:`relight.open_store` (``sqlite:////abs/path.db``: four slashes
            for an absolute path). By default ``fit`` keeps one in its run folder (``store.db``) and
            ``dev`` one in memory.
        n_runners: runner processes; 1 runs the agent in this process unless ``runner_process``.
            With processes, a store that lives in this process is served to them over HTTP on loopback.
        runner_process: run the one runner of ``n_runners=1`` in a process of its own, as more
            runners always are (and as Agent Lightning runs its one runner by default): the agent and
            its client then use another core than the gateway, the store and the algorithm, and the
            agent must be importable there (see :class:`relight.runner_processes.RunnerProcesses`). In this
            process by default: nothing to pickle, one process to debug.
        runners: runners beyond this machine instead, e.g. ``RayRunners(8)`` (:mod:`relight.ray_runners`);
            give them a store they can reach (``http://`` of ``relight store serve``) and a gateway
            host they can reach (``gateway={"host": "0.0.0.0"}``).
        concurrency: rollouts running at once in each runner.
        batch_size: tasks per training step.
        n_samples: rollouts per task in a step (one group).
        epochs: passes over the training tasks.
        val_every: validate every this many steps (and before and after training); None: only after.
        transitions: how rollouts become transitions (role filter, credit, groups).
        max_attempts: tries per rollout before it fails.
        timeout: seconds one attempt may run; None for no limit.
        lease_seconds: how long an attempt stays a runner's without a heartbeat; a runner that dies
            holds its rollouts this long at most (a runner process that dies fails them at once on noticing).
        heartbeat_seconds: how often runners renew leases; a third of ``lease_seconds`` by default.
        max_runner_restarts: runner processes that die are restarted this many times in all;
            ``fit()`` fails once none is left.
        checkpoint_dir: where ``algorithm.save`` writes after each step (``step-<n>``, every one kept);
            by default the run folder's ``checkpoints/``, which keeps the last two.
        max_staleness: None trains synchronously; ``k`` trains asynchronously, never on a transition
            more than ``k`` policy versions behind (see :mod:`relight.asynchronous`; 0 behaves as synchronous).
        group_timeout: in asynchronous training, seconds after which an unfinished group is cancelled.
        resample_stale: in asynchronous training, sample a group dropped as too stale again (else it is only counted).
        gateway: how the gateway listens and retokenizes.
        console: where tables and progress go.
        run_dir: the run folder of ``fit`` (see :mod:`relight.runfolder`); ``runs/<date>-<time>`` by default.
        progress_every: seconds between progress lines when the console is not a terminal.
        dynamic_sampling: at most this many extra rounds per step that sample again the tasks whose
            group has no learning signal (all rewards equal), as DAPO does; 0 never does.
        group_rewards: rewards that score each finished training group together before it is trained
            on, such as a judge model (:class:`relight.rewards.Judge`); their rewards add to the agent's
            own and their costs join each step's metrics (see :mod:`relight.rewards.group`).
    """

    def __init__(
        self,
        algorithm: Algorithm | None = None,
        *,
        store: Store | str | None = None,
        n_runners: int = 1,
        runner_process: bool = False,
        runners: RunnerGroup | None = None,
        concurrency: int = 16,
        batch_size: int = 8,
        n_samples: int = 4,
        epochs: int = 1,
        val_every: int | None = None,
        transitions: TransitionBuilder | None = None,
        max_attempts: int = 3,
        timeout: float | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        heartbeat_seconds: float | None = None,
        max_runner_restarts: int = 3,
        checkpoint_dir: str | Path | None = None,
        max_staleness: int | None = None,
        group_timeout: float | None = None,
        resample_stale: bool = False,
        gateway: GatewayOptions | None = None,
        console: Console | None = None,
        run_dir: str | Path | None = None,
        progress_every: float = 30.0,
        dynamic_sampling: int = 0,
        group_rewards: Sequence[GroupReward] = (),
    ) -> None:
        for name, value in (("n_runners", n_runners), ("batch_size", batch_size), ("n_samples", n_samples)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        self.algorithm = algorithm
        self.store = store
        self.n_runners = n_runners
        self.runner_process = runner_process
        self.runners = runners
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.n_samples = n_samples
        self.epochs = epochs
        self.val_every = val_every
        self.transitions = transitions or TransitionBuilder()
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.max_runner_restarts = max_runner_restarts
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.max_staleness = max_staleness
        self.group_timeout = group_timeout
        self.resample_stale = resample_stale
        self.gateway_options: GatewayOptions = gateway or {}
        self.console = console or Console()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress = RunProgress(self.console, every=progress_every)
        self.dynamic_sampling = dynamic_sampling
        self.group_rewards = tuple(group_rewards)
        GroupRewards(self.group_rewards)  # distinct names, checked now rather than at the first step
        self._role_check: RoleCheck | None = None

    # -- fit --------------------------------------------------------------------------------------

    def fit(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """Train the algorithm's policy on the agent's rollouts; returns each step's metrics.

        ``dashboard=True`` serves ``relight dashboard`` of the run's store while it trains and prints its URL.
        """
        return _loop.run(self.afit(agent, train_dataset, val_dataset, dashboard=dashboard))

    async def afit(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """:meth:`fit` on the running event loop."""
        algorithm = self.algorithm
        if algorithm is None:
            raise ConfigError("fit() needs a Trainer(algorithm=...): relight-torch or relight-verl provide one")
        if not train_dataset:
            raise ConfigError("train_dataset is empty; fit() needs at least one task")
        history: list[dict[str, float]] = []
        run = RunFolder(self.run_dir or default_run_dir())
        store_url = self.store if self.store is not None else run.store_url
        checkpoints = self.checkpoint_dir or run.checkpoints
        self._role_check = RoleCheck(self.transitions.roles)
        self.progress.note(f"relight: run folder {run.path}  (store {_named(store_url)})")
        ended = "failed"
        try:
            # On a worker thread, like save(): relight-verl starts its whole cluster in upstreams().
            upstreams = await asyncio.to_thread(algorithm.upstreams)
            async with (
                self._loop(agent, upstreams, algorithm.model, store_url) as loop,
                self._dashboard(loop.store, upstreams, dashboard),
            ):
                resources = await self._publish(loop, algorithm)
                if val_dataset and self.val_every is not None:
                    history.append(await self._validate(loop, val_dataset, resources, step=0))
                    run.record("val", history[-1])

                async def finish_step(metrics: dict[str, float], resources: Resources) -> dict[str, float]:
                    """After an update: checkpoint, the metrics file, validation on schedule."""
                    step = int(metrics["step"])
                    await asyncio.to_thread(algorithm.save, checkpoints / f"step-{step}")
                    if self.checkpoint_dir is None:
                        run.prune_checkpoints()
                    run.record("train", metrics)
                    if val_dataset and self.val_every and step % self.val_every == 0:
                        validation = await self._validate(loop, val_dataset, resources, step)
                        run.record("val", validation)
                        metrics |= validation
                    return metrics

                hooks = LoopHooks(
                    publish=lambda: self._publish(loop, algorithm),
                    returns=lambda rollouts: self._returns(loop.store, rollouts),
                    finish_step=finish_step,
                    report=self.progress.step,
                )
                training = self._training(loop, algorithm, hooks)
                step, resources, steps = await training.run(train_dataset, resources)
                history += steps
                if val_dataset and not (self.val_every and step % self.val_every == 0):
                    history.append(await self._validate(loop, val_dataset, resources, step))
                    run.record("val", history[-1])
                    self.progress.step(history[-1])
            ended = "finished"
        finally:
            run.write_summary({"status": ended, "policy_version": algorithm.policy_version, "store": _named(store_url)})
            self.progress.note(f"relight: run {ended}; metrics, summary and reward curve in {run.path}")
        return history

    def _training(self, loop: _Loop, algorithm: Algorithm, hooks: LoopHooks) -> TrainingLoop:
        """The synchronous loop, or the asynchronous one when ``max_staleness`` is set."""
        if self.max_staleness is not None:
            options = AsyncOptions(
                max_staleness=self.max_staleness,
                batch_size=self.batch_size,
                n_samples=self.n_samples,
                epochs=self.epochs,
                max_attempts=self.max_attempts,
                group_timeout=self.group_timeout,
                resample_stale=self.resample_stale,
            )
            return AsyncTraining(
                loop.store,
                loop.gateway,
                algorithm,
                self.transitions,
                options,
                hooks,
                console=self.console,
                rewards=GroupRewards(self.group_rewards),
            )

        async def run_batch(requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
            return await self._run_batch(loop, requests, label, check_roles=True)

        sync = SyncOptions(
            batch_size=self.batch_size,
            n_samples=self.n_samples,
            epochs=self.epochs,
            max_attempts=self.max_attempts,
            dynamic_sampling=self.dynamic_sampling,
        )
        return SyncTraining(
            loop.store,
            loop.gateway,
            algorithm,
            self.transitions,
            sync,
            hooks,
            run_batch=run_batch,
            warn=self.progress.warn,
            rewards=GroupRewards(self.group_rewards),
        )

    async def _validate(
        self, loop: _Loop, dataset: Sequence[JsonValue], resources: Resources, step: int
    ) -> dict[str, float]:
        requests = [
            RolloutRequest(
                input=task, mode=Mode.VAL, max_attempts=self.max_attempts, resources_version=resources.version
            )
            for task in dataset
        ]
        rollouts = await self._run_batch(loop, requests, f"val @ step {step}")
        await loop.gateway.flush()
        returns = await self._returns(loop.store, rollouts)
        succeeded = sum(r.status is RolloutStatus.SUCCEEDED for r in rollouts)
        return {
            "step": step,
            "val_reward_mean": statistics.fmean(returns) if returns else 0.0,
            "val_success_rate": succeeded / len(rollouts),
        }

    async def _publish(self, loop: _Loop, algorithm: Algorithm) -> Resources:
        """Make the algorithm's current policy the served and published one."""
        loop.gateway.policy_version = algorithm.policy_version
        items: dict[str, JsonValue] = {"model": algorithm.model, "policy_version": algorithm.policy_version}
        return await loop.store.publish_resources({**items, **algorithm.resources()})

    async def _returns(self, store: Store, rollouts: Sequence[Rollout]) -> list[float]:
        """Each succeeded rollout's return (the sum of its last attempt's rewards; 0 when it had none)."""
        returns: list[float] = []
        for rollout in rollouts:
            if rollout.status is RolloutStatus.SUCCEEDED:
                returns.append(episode_return(await last_attempt_spans(store, rollout.rollout_id)) or 0.0)
        return returns

    # -- dev --------------------------------------------------------------------------------------

    def dev(
        self,
        agent: Agent,
        dataset: Sequence[JsonValue],
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        vllm: bool | None = None,
    ) -> list[DevResult]:
        """Run each task once against ``base_url`` (or the algorithm's policy) and print what happened."""
        return _loop.run(self.adev(agent, dataset, base_url=base_url, model=model, api_key=api_key, vllm=vllm))

    async def adev(
        self,
        agent: Agent,
        dataset: Sequence[JsonValue],
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        vllm: bool | None = None,
    ) -> list[DevResult]:
        """:meth:`dev` on the running event loop.

        Args:
            base_url: an OpenAI-compatible endpoint (``https://api.openai.com/v1``, a local vLLM).
            model: the model name the agent is told to use.
            api_key: for ``base_url``; ``OPENAI_API_KEY`` by default.
            vllm: ask the endpoint for vLLM's token ids: by default the gateway finds out whether it
                takes them (see :class:`relight.gateway.OpenAIUpstream`); False never asks.
        """
        upstreams: Sequence[UpstreamTarget | Upstream]
        if base_url is not None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            upstreams = [OpenAIUpstream(base_url, vllm=vllm, api_key=key)]
        elif self.algorithm is not None:
            upstreams = await asyncio.to_thread(self.algorithm.upstreams)
        else:
            raise ConfigError("dev() needs base_url=<an OpenAI-compatible endpoint> or a Trainer with an algorithm")
        model = model or (self.algorithm.model if self.algorithm is not None else None)
        if not model:
            raise ConfigError("dev() needs model=<the model name to call>")
        async with self._loop(agent, upstreams, model, self.store or "memory://") as loop:
            requests = [RolloutRequest(input=task, mode=Mode.VAL, max_attempts=self.max_attempts) for task in dataset]
            rollouts = await self._run_batch(loop, requests, "dev")
            await loop.gateway.flush()
            results = [await dev_result(loop.store, rollout) for rollout in rollouts]
        self.console.print(dev_table(results))
        return results

    # -- shared machinery -------------------------------------------------------------------------

    @asynccontextmanager
    async def _loop(
        self, agent: Agent, upstreams: Sequence[UpstreamTarget | Upstream], model: str, store_url: Store | str
    ) -> AsyncGenerator[_Loop]:
        """A store, a gateway in front of ``upstreams`` and runners working on them, for the block's duration."""
        store = open_store(store_url) if isinstance(store_url, str) else store_url
        try:
            async with Gateway(
                store,
                upstreams,
                policy_version=self.algorithm.policy_version if self.algorithm is not None else None,
                **self.gateway_options,
            ) as gateway:
                options: dict[str, Any] = {
                    "gateway_url": gateway.url,
                    "model": model,
                    "concurrency": self.concurrency,
                    "timeout": self.timeout,
                    "lease_seconds": self.lease_seconds,
                    "heartbeat_seconds": self.heartbeat_seconds,
                }
                if self.runners is not None:
                    async with self._shared(store, store_url) as shared_url:
                        await asyncio.to_thread(self.runners.start, agent, shared_url, **options)
                        try:
                            yield _Loop(store, gateway)
                        finally:
                            await asyncio.to_thread(self.runners.stop)
                elif self.n_runners == 1 and not self.runner_process:
                    runner = Runner(agent, store, gateway=gateway, **options)
                    running = asyncio.create_task(runner.run())
                    try:
                        yield _Loop(store, gateway)
                    finally:
                        runner.stop()
                        await running
                else:
                    async with self._shared(store, store_url) as shared_url:
                        processes = RunnerProcesses(self.n_runners, agent, shared_url, **options)
                        processes.start()
                        supervisor = RunnerSupervisor(processes, store, max_restarts=self.max_runner_restarts)
                        supervisor.start()
                        try:
                            yield _Loop(store, gateway, supervisor)
                        finally:
                            await supervisor.stop()
                            await asyncio.to_thread(processes.stop)
        finally:
            if isinstance(store_url, str):
                await store.close()

    def _dashboard(
        self, store: Store, upstreams: Sequence[UpstreamTarget | Upstream], wanted: bool
    ) -> AbstractAsyncContextManager[object]:
        if not wanted:
            return nullcontext()
        from relight.dashboard.server import beside_run  # the web app loads only when asked for

        return beside_run(store, self.transitions, upstreams, self.console)

    @asynccontextmanager
    async def _shared(self, store: Store, url: Store | str) -> AsyncGenerator[str]:
        """A URL runner processes can open ``store`` by: its own when it is an HTTP store, else served here."""
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            yield url
            return
        from relight.stores.http.server import create_app

        # Short long-polls: shutting down waits for the polls still held (the server drops those of
        # runner processes that have gone), and a second is quick either way.
        async with AsgiServer(create_app(store, max_poll_seconds=1.0)) as server:
            yield server.url

    async def _run_batch(
        self, loop: _Loop, requests: Sequence[RolloutRequest], label: str, *, check_roles: bool = False
    ) -> list[Rollout]:
        """Enqueue rollouts and wait for all of them, showing progress (and checking the role filter early)."""
        rollouts = await loop.store.enqueue(requests)
        ids = [rollout.rollout_id for rollout in rollouts]
        latest = {rollout.rollout_id: rollout for rollout in rollouts}
        with self.progress.batch(label, len(ids), calls=lambda: loop.gateway.stats.calls) as progress:
            while True:
                # A finished rollout never changes again: only the others are waited on (and read again).
                pending = [rollout_id for rollout_id, rollout in latest.items() if not rollout.is_finished]
                latest.update((rollout.rollout_id, rollout) for rollout in await loop.store.wait(pending, timeout=0.5))
                rollouts = [latest[rollout_id] for rollout_id in ids]
                if loop.supervisor is not None:
                    loop.supervisor.check()
                    self.progress.health = loop.supervisor.health()
                progress.update(rollouts)
                if check_roles and self._role_check is not None and not self._role_check.decided:
                    await loop.gateway.flush()
                    await self._role_check.check(loop.store, rollouts)
                if all(rollout.is_finished for rollout in rollouts):
                    return rollouts


def _named(store: Store | str) -> str:
    return store if isinstance(store, str) else type(store).__name__
