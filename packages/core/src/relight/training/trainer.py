"""The trainer: runs an agent's rollouts through the gateway and, given an algorithm, trains on them.

``Trainer().dev(agent, tasks, base_url=..., model=...)`` checks the wiring against any
OpenAI-compatible endpoint: it runs each task once and prints a table of rewards, calls and errors.

``Trainer(algorithm=...).fit(agent, train, val)`` trains. Each step enqueues ``batch_size`` tasks
``n_samples`` times each (the samples of a task share a group, for GRPO), waits for them, turns them
into transitions (:class:`relight.TransitionBuilder`) and hands those to
``algorithm.update`` while the gateway is paused, then publishes the new policy version: the loop of
:mod:`relight.training.sync_loop`, or of :mod:`relight.training.async_loop` with ``max_staleness``. The trainer sets
up the store, gateway and runners both loops work on, and lends them publishing, checkpoints and
validation, which runs before the first update (``val_before_fit``), every ``val_every`` steps and at
the end.

Every ``fit`` writes a run folder (``run_dir``, ``runs/<date>-<time>`` by default; see
:mod:`relight.training.run_folder`): metrics, summary, reward curve, checkpoints and, by default, the store.
Progress shows as a live bar on a terminal and as plain lines in a log (:mod:`relight.training.progress`).

An algorithm that improves the agent's prompts instead of its weights (relight-apo's ``APO``) is a
:class:`relight.training.search.SearchAlgorithm`: ``fit`` sets up the same store, gateway, runners and
run folder and lets it run its own search (see :mod:`relight.training.search`).

A run killed before it finished is resumed by running the same ``fit`` with the same ``run_dir``
again: from its last whole checkpoint, at the same place in the task stream, with the same
metrics file (see :mod:`relight.training.resume`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from pydantic import JsonValue
from rich.console import Console

from relight._internal import event_loop
from relight._internal.server import AsgiServer
from relight.agent import Agent
from relight.algorithm import Algorithm, UpstreamTarget, algorithm_settings, policy_versions
from relight.errors import ConfigError, NotFoundError
from relight.gateway import Gateway, OpenAIUpstream, Upstream
from relight.plugins import open_store
from relight.policies import Policy, per_policy
from relight.records import Mode, Resources, Rollout, RolloutRequest, RolloutStatus
from relight.rewards.group import GroupReward, GroupRewards
from relight.runners.processes import RunnerProcesses
from relight.runners.remote import RemoteRunners
from relight.runners.runner import Runner
from relight.runners.supervisor import RunnerSupervisor
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.tracking import ExperimentLogger, LoggerSet, RunInfo, resolve_loggers
from relight.training.async_loop import AsyncTraining
from relight.training.dev_report import DevResult, dev_result, dev_row, dev_table
from relight.training.loop import LoopHooks, Resume, TrainingLoop
from relight.training.options import GatewayOptions, TrainerOptions
from relight.training.progress import RunProgress
from relight.training.resume import Checkpoints, RunIdentity, RunRecord
from relight.training.role_check import RoleCheck
from relight.training.run_folder import RunFolder, default_run_dir
from relight.training.search import SearchAlgorithm, SearchRun, publish_changed, restore_search
from relight.training.sync_loop import SyncTraining
from relight.transitions.builder import PolicyMap, TransitionBuilder, episode_return, last_attempt_spans
from relight.transitions.run_config import POLICY_METRICS_ITEM, POLICY_VERSIONS_ITEM, TRANSITIONS_ITEM, describe

__all__ = ["DEV_MAX_TOKENS", "DEV_TIMEOUT", "DevResult", "GatewayOptions", "Trainer", "TrainerOptions"]


DEV_MAX_TOKENS = 1024
"""Dev mode's output cap for a call whose request sets none (``Trainer.dev(max_tokens=...)`` changes it)."""
DEV_TIMEOUT = 300.0
"""Seconds a dev rollout may run (``Trainer.dev(timeout=...)`` or ``Trainer(timeout=...)`` changes it)."""


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
            agent must be importable there (see :class:`relight.runners.processes.RunnerProcesses`). In this
            process by default: nothing to pickle, one process to debug.
        runners: runners beyond this machine instead, e.g. ``RayRunners(8)`` (:mod:`relight.runners.ray_actors`);
            give them a store they can reach (``http://`` of ``relight store serve``) and a gateway
            host they can reach (``gateway={"host": "0.0.0.0"}``).
        concurrency: rollouts running at once in each runner.
        batch_size: tasks per training step.
        n_samples: rollouts per task in a step (one group).
        epochs: passes over the training tasks.
        val_every: validate every this many steps (and after training); None: only after.
        val_before_fit: validate once more before the first update (step 0), so the run reports a
            before-figure it measured (``initial_val_reward_mean``); Agent Lightning's ``val_before_train``.
            None (the default) does whenever validation tasks are given; False never does, and the
            run then reports no before-figure.
        transitions: how rollouts become transitions (role filter, credit, groups).
        policies: several policies in one run, one per role (see :mod:`relight.policies`): each name maps
            to a :class:`relight.Policy` or to its roles as a role filter takes them
            (``{"writer": "write_query|rewrite_query", "checker": "check_query"}``). The gateway serves each
            call by its role's policy, and each transition names the policy that trains it; a role no
            policy names is served by the base model and not trained. The algorithm learns them
            through its ``set_policies(policies)`` before it serves; one without that method cannot
            train several policies (TypeError).
        max_attempts: tries per rollout before it fails.
        timeout: seconds one attempt may run; None for no limit.
        lease_seconds: how long an attempt stays a runner's without a heartbeat; a runner that dies
            holds its rollouts this long at most (a runner process that dies fails them at once on noticing).
        heartbeat_seconds: how often runners renew leases; a third of ``lease_seconds`` by default.
        max_runner_restarts: runner processes that die are restarted this many times in all;
            ``fit()`` fails once none is left.
        checkpoint_dir: where ``algorithm.save`` writes after each step (``step-<n>``, every one kept);
            by default the run folder's ``checkpoints/``, which keeps the last two. Each is written
            under a temporary name and renamed once whole.
        max_staleness: None trains synchronously; ``k`` trains asynchronously, never on a transition
            more than ``k`` policy versions behind (see :mod:`relight.training.async_loop`; 0 behaves as synchronous).
        group_timeout: in asynchronous training, seconds after which an unfinished group is cancelled.
        resample_stale: in asynchronous training, sample a group dropped as too stale again (else it is only counted).
        gateway: how the gateway listens and retokenizes.
        console: where tables and progress go.
        run_dir: the run folder of ``fit`` (see :mod:`relight.training.run_folder`); ``runs/<date>-<time>`` by default.
            A folder holding a run that did not finish is resumed (:mod:`relight.training.resume`):
            run the same command again to take up a killed run.
        progress_every: seconds between progress lines when the console is not a terminal.
        dynamic_sampling: at most this many extra rounds per step that sample again the tasks whose
            group has no learning signal (all rewards equal), as DAPO does; 0 never does.
        loggers: experiment trackers that get every metric ``fit`` writes, with the run's configuration:
            objects (:class:`relight.tracking.WandbLogger`, ``MlflowLogger``, ``TensorBoardLogger``) or
            names a plugin registered (``"wandb"``, ``"mlflow"``, ``"tensorboard"``); by default
            those ``RELIGHT_LOGGERS`` names (see :mod:`relight.tracking`).
        group_rewards: rewards that score each finished training group together before it is trained
            on, such as a judge model (:class:`relight.rewards.Judge`); their rewards add to the agent's
            own and their costs join each step's metrics (see :mod:`relight.rewards.group`).
        resources: named resources the agent reads (``llm.resources``, :func:`relight.resource`; see
            :mod:`relight.resources.reading`), such as the prompt a prompt optimisation found, published
            with every version ``fit`` and ``dev`` run with, so each rollout records the one it read.
    """

    def __init__(
        self,
        algorithm: Algorithm | SearchAlgorithm | None = None,
        *,
        store: Store | str | None = None,
        n_runners: int = 1,
        runner_process: bool = False,
        runners: RemoteRunners | None = None,
        concurrency: int = 16,
        batch_size: int = 8,
        n_samples: int = 4,
        epochs: int = 1,
        val_every: int | None = None,
        val_before_fit: bool | None = None,
        transitions: TransitionBuilder | None = None,
        policies: PolicyMap | None = None,
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
        loggers: Sequence[ExperimentLogger | str] | None = None,
        group_rewards: Sequence[GroupReward] = (),
        resources: Mapping[str, JsonValue] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.options = TrainerOptions(
            store=store,
            n_runners=n_runners,
            runner_process=runner_process,
            runners=runners,
            concurrency=concurrency,
            batch_size=batch_size,
            n_samples=n_samples,
            epochs=epochs,
            val_every=val_every,
            val_before_fit=val_before_fit,
            transitions=_with_policies(transitions or TransitionBuilder(), policies),
            max_attempts=max_attempts,
            timeout=timeout,
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds,
            max_runner_restarts=max_runner_restarts,
            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir is not None else None,
            max_staleness=max_staleness,
            group_timeout=group_timeout,
            resample_stale=resample_stale,
            gateway=gateway or GatewayOptions(),
            run_dir=Path(run_dir) if run_dir is not None else None,
            progress_every=progress_every,
            dynamic_sampling=dynamic_sampling,
            loggers=tuple(loggers) if loggers is not None else None,
            group_rewards=tuple(group_rewards),
            resources=dict(resources or {}),
        )
        GroupRewards(self.options.group_rewards)  # distinct names, checked now rather than at the first step
        if algorithm is not None and self.policies is not None:
            _policy_setter(algorithm)  # an algorithm that cannot train several policies is refused now
        self.console = console or Console()
        self.progress = RunProgress(self.console, every=progress_every)
        self._role_check: RoleCheck | None = None

    @property
    def policies(self) -> Mapping[str, Policy] | None:
        """The run's policies by name (see :mod:`relight.policies`); None for a run of one policy."""
        return self.options.transitions.policies

    def _tell_policies(self, algorithm: Algorithm | SearchAlgorithm) -> None:
        """Hand the run's policies to the algorithm before it serves (and before a checkpoint is loaded)."""
        if self.policies is not None:
            _policy_setter(algorithm)(dict(self.policies))

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
        return event_loop.run(self.afit(agent, train_dataset, val_dataset, dashboard=dashboard))

    async def afit(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """:meth:`fit` on the running event loop."""
        algorithm = self._fit_algorithm(train_dataset)
        if isinstance(algorithm, SearchAlgorithm):
            return await self._search(agent, algorithm, train_dataset, val_dataset or [], dashboard=dashboard)
        history: list[dict[str, float]] = []
        options = self.options
        trackers = LoggerSet(resolve_loggers(options.loggers))
        run = RunFolder(options.run_dir or default_run_dir(), loggers=trackers)
        identity = RunIdentity.of(
            agent,
            algorithm,
            batch_size=options.batch_size,
            n_samples=options.n_samples,
            epochs=options.epochs,
            max_staleness=options.max_staleness,
            tasks=train_dataset,
            policies=self.policies,
        )
        store_url = options.store if options.store is not None else run.store_url
        config = self._config(algorithm, store_url)
        record = RunRecord.open(run.path, identity, settings=config)
        for tracker, link in trackers.start(RunInfo(run.path.name, run.path, config)):
            self.progress.note(f"relight: {tracker} run at {link}")
        checkpoints = Checkpoints(options.checkpoint_dir or run.checkpoints, warn=self.progress.warn)
        self._role_check = RoleCheck(options.transitions.roles, policies=self.policies)
        self.progress.note(f"relight: run folder {run.path}  (store {_named(store_url)})")
        self._tell_policies(algorithm)
        resume: Resume | None = None
        if record.resumed:
            resume, history = await self._resume(run, checkpoints, algorithm)
        ended = "failed"
        try:
            # On a worker thread, like save(): relight-verl starts its whole cluster in upstreams().
            upstreams = await asyncio.to_thread(algorithm.upstreams)
            async with (
                self._loop(agent, upstreams, algorithm.model, store_url) as loop,
                self._dashboard(loop.store, upstreams, dashboard),
            ):
                resources = await self._publish(loop, algorithm)
                if val_dataset:
                    await self._first_validation(loop, run, val_dataset, resources, resume, history)
                training: TrainingLoop | None = None

                saved = [algorithm.policy_version]

                async def finish_step(metrics: dict[str, float], resources: Resources) -> dict[str, float]:
                    """After an update: a checkpoint if the weights changed, metrics, validation on schedule."""
                    step = int(metrics["step"])
                    if algorithm.policy_version != saved[0]:  # a skipped update leaves no checkpoint
                        position = training.position() if training is not None else {}
                        await asyncio.to_thread(checkpoints.save, step, algorithm, loop=position, metrics=metrics)
                        saved[0] = algorithm.policy_version
                        if self.options.checkpoint_dir is None:
                            run.prune_checkpoints()
                    run.record("train", metrics)
                    if val_dataset and self._validation_due(step):
                        validation = await self._validate(loop, val_dataset, resources, step)
                        run.record("val", validation)
                        metrics |= validation
                    return metrics

                hooks = LoopHooks(
                    publish=lambda metrics: self._publish(loop, algorithm, metrics),
                    returns=lambda rollouts: self._returns(loop.store, rollouts),
                    finish_step=finish_step,
                    report=self.progress.step,
                )
                training = self._training(loop, algorithm, hooks, record.run_id)
                step, resources, steps = await training.run(train_dataset, resources, resume=resume)
                history += steps
                if val_dataset and not self._validation_due(step):
                    history.append(await self._validate(loop, val_dataset, resources, step))
                    run.record("val", history[-1])
                    self.progress.step(history[-1])
            ended = "finished"
        finally:
            summary: dict[str, JsonValue] = {"status": ended, "policy_version": algorithm.policy_version}
            if (versions := policy_versions(algorithm)) is not None:
                summary[POLICY_VERSIONS_ITEM] = dict(versions)
            run.write_summary({**summary, "store": _named(store_url)})
            self.progress.note(f"relight: run {ended}; metrics, summary and reward curve in {run.path}")
        return history

    def _fit_algorithm(self, train_dataset: Sequence[JsonValue]) -> Algorithm | SearchAlgorithm:
        """The algorithm ``fit`` runs; ConfigError when there is none or nothing to train on."""
        if self.algorithm is None:
            raise ConfigError("fit() needs a Trainer(algorithm=...): relight-torch or relight-verl provide one")
        if not train_dataset:
            raise ConfigError("train_dataset is empty; fit() needs at least one task")
        return self.algorithm

    async def _search(
        self,
        agent: Agent,
        algorithm: SearchAlgorithm,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue],
        *,
        dashboard: bool,
    ) -> list[dict[str, float]]:
        """:meth:`fit` of a search algorithm (see :mod:`relight.training.search`): the run folder, store, gateway
        and runners of training, and the algorithm's own loop; returns the metrics of each step of its search."""
        options = self.options
        trackers = LoggerSet(resolve_loggers(options.loggers))
        run = RunFolder(options.run_dir or default_run_dir(), loggers=trackers)
        identity = RunIdentity.of(
            agent,
            algorithm,
            batch_size=options.batch_size,
            n_samples=options.n_samples,
            epochs=options.epochs,
            max_staleness=None,
            tasks=train_dataset,
        )
        store_url = options.store if options.store is not None else run.store_url
        config = self._config(algorithm, store_url)
        record = RunRecord.open(run.path, identity, settings=config)
        for tracker, link in trackers.start(RunInfo(run.path.name, run.path, config)):
            self.progress.note(f"relight: {tracker} run at {link}")
        self.progress.note(f"relight: run folder {run.path}  (store {_named(store_url)})")
        restored = restore_search(run) if record.resumed else None
        if record.resumed:
            self.progress.note(
                f"relight: resuming the search in {run.path} from step {restored.step if restored else 0}"
            )
        ended, summary = "failed", dict[str, JsonValue]()
        try:
            upstreams = await asyncio.to_thread(algorithm.upstreams)
            async with (
                self._loop(agent, upstreams, algorithm.model, store_url) as loop,
                self._dashboard(loop.store, upstreams, dashboard),
            ):

                async def run_batch(requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
                    return await self._run_batch(loop, requests, label)

                search = SearchRun(
                    store=loop.store,
                    run_batch=run_batch,
                    flush=loop.gateway.flush,
                    folder=run,
                    run_id=record.run_id,
                    progress=self.progress,
                    base_items={
                        "model": algorithm.model,
                        TRANSITIONS_ITEM: describe(options.transitions),
                        **options.resources,
                    },
                    rewards=GroupRewards(options.group_rewards),
                    restored=restored,
                    max_attempts=options.max_attempts,
                )
                summary = dict(await algorithm.search(search, train_dataset, val_dataset))
            ended = "finished"
        finally:
            run.write_summary({**summary, "status": ended, "store": _named(store_url)})
            self.progress.note(f"relight: search {ended}; metrics, summary and reward curve in {run.path}")
        return [
            {key: float(value) for key, value in row.items() if key not in ("kind", "time")}
            for row in run.rows
            if row["kind"] == "train"
        ]

    async def _resume(
        self, run: RunFolder, checkpoints: Checkpoints, algorithm: Algorithm
    ) -> tuple[Resume, list[dict[str, float]]]:
        """Load the newest whole checkpoint and the metrics up to it; at step 0 (the algorithm as made) when none is."""
        began = time.perf_counter()
        seen = _last_step(run)
        point = await asyncio.to_thread(checkpoints.restore, algorithm)
        step = point.step if point is not None else 0
        version = point.policy_version if point is not None else algorithm.policy_version
        note = {
            "steps_lost": max(seen - step, 0),
            "policy_version": version,
            "seconds_to_resume": round(time.perf_counter() - began, 3),
        }
        history = run.resume(step, point.metrics if point is not None else {}, note)
        where = f"step {step} ({point.checkpoint.name})" if point is not None and point.checkpoint else "the start"
        self.progress.note(f"relight: resuming the run in {run.path} from {where}, policy version {version}")
        return Resume(step, point.loop if point is not None else {}), history

    async def _first_validation(
        self,
        loop: _Loop,
        run: RunFolder,
        dataset: Sequence[JsonValue],
        resources: Resources,
        resume: Resume | None,
        history: list[dict[str, float]],
    ) -> None:
        """Validation before the first update, or on resuming the one the killed run died before."""
        if resume is None:
            if self._validation_due(0):
                history.append(await self._validate(loop, dataset, resources, step=0))
                run.record("val", history[-1])
            return
        if not self._validation_missing(resume.step, history):
            return
        validation = await self._validate(loop, dataset, resources, resume.step)
        run.record("val", validation)
        if history and history[-1].get("step") == resume.step:
            history[-1] |= validation
        else:
            history.append(validation)

    def _validation_missing(self, step: int, history: Sequence[Mapping[str, float]]) -> bool:
        """Whether step ``step`` was due a validation that the restored metrics do not hold."""
        if not self._validation_due(step):
            return False
        return not any(row.get("step") == step and "val_reward_mean" in row for row in history)

    def _validation_due(self, step: int) -> bool:
        """Whether the policy after step ``step`` is validated before training goes on (0: before the first update)."""
        if step == 0:
            return self.options.val_before_fit is not False
        every = self.options.val_every
        return every is not None and step % every == 0

    def _config(self, algorithm: Algorithm | SearchAlgorithm, store_url: Store | str) -> dict[str, JsonValue]:
        """The run's settings as experiment trackers show them."""
        return {
            "algorithm": type(algorithm).__name__,
            "model": str(algorithm.model),
            "store": _without_password(_named(store_url)),
            "batch_size": self.options.batch_size,
            "n_samples": self.options.n_samples,
            "epochs": self.options.epochs,
            "val_every": self.options.val_every,
            "val_before_fit": self.options.val_before_fit,
            "max_staleness": self.options.max_staleness,
            "concurrency": self.options.concurrency,
            "n_runners": self.options.n_runners,
            "max_attempts": self.options.max_attempts,
            "dynamic_sampling": self.options.dynamic_sampling,
            "checkpoint_dir": str(self.options.checkpoint_dir.resolve()) if self.options.checkpoint_dir else None,
            "roles": str(self.options.transitions.roles) if self.options.transitions.roles is not None else None,
            "policies": {name: policy.describe() for name, policy in self.policies.items()} if self.policies else None,
            **{f"algorithm.{name}": value for name, value in algorithm_settings(algorithm).items()},
        }

    def _training(self, loop: _Loop, algorithm: Algorithm, hooks: LoopHooks, run_id: str) -> TrainingLoop:
        """The synchronous loop, or the asynchronous one when ``max_staleness`` is set."""
        if self.options.max_staleness is not None:
            return AsyncTraining(
                loop.store,
                loop.gateway,
                algorithm,
                self.options,
                hooks,
                console=self.console,
                run_id=run_id,
                rewards=GroupRewards(self.options.group_rewards),
            )

        async def run_batch(requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
            return await self._run_batch(loop, requests, label, check_roles=True)

        return SyncTraining(
            loop.store,
            loop.gateway,
            algorithm,
            self.options,
            hooks,
            run_batch=run_batch,
            warn=self.progress.warn,
            run_id=run_id,
            rewards=GroupRewards(self.options.group_rewards),
        )

    async def _validate(
        self, loop: _Loop, dataset: Sequence[JsonValue], resources: Resources, step: int
    ) -> dict[str, float]:
        requests = [
            RolloutRequest(
                input=task, mode=Mode.VAL, max_attempts=self.options.max_attempts, resources_version=resources.version
            )
            for task in dataset
        ]
        rollouts = await self._run_batch(loop, requests, f"val @ step {step}")
        await loop.gateway.flush()
        returns = await self._returns(loop.store, rollouts)
        succeeded = sum(r.status is RolloutStatus.SUCCEEDED for r in rollouts)
        # val_completed_rate: the share of validation rollouts that ran to the end without an error,
        # whatever reward they earned (the reward is val_reward_mean's).
        return {
            "step": step,
            "val_reward_mean": statistics.fmean(returns) if returns else 0.0,
            "val_completed_rate": succeeded / len(rollouts),
        }

    async def _publish(
        self, loop: _Loop, algorithm: Algorithm, metrics: Mapping[str, float] | None = None
    ) -> Resources:
        """Make the algorithm's current policy the served and published one.

        A version is published only when it differs from the last one the store holds (an update that
        changed no weights, or a resumed run, publishes nothing), so resources versions, policy versions
        and the dashboard's versions stay one count. The items also say how the run turns calls into
        transitions (:func:`relight.transitions.run_config.describe`), so ``relight show`` and the
        dashboard judge calls as the run did. With several policies a version also carries each
        policy's version and what the update that made it reported per policy (``metrics``' keys
        ``<metric>/<policy>``: loss, reward, calls trained and left out), which the dashboard shows.
        """
        loop.gateway.policy_version = algorithm.policy_version
        items: dict[str, JsonValue] = {
            "model": algorithm.model,
            "policy_version": algorithm.policy_version,
            TRANSITIONS_ITEM: describe(self.options.transitions),
            **self.options.resources,
            **algorithm.resources(),
        }
        versions = policy_versions(algorithm)
        if versions is not None:
            items[POLICY_VERSIONS_ITEM] = dict(versions)
        try:
            latest = await loop.store.get_resources()
        except NotFoundError:
            latest = None
        if latest is not None and {k: v for k, v in latest.items.items() if k != POLICY_METRICS_ITEM} == items:
            return latest
        if metrics is not None and self.policies is not None:
            items[POLICY_METRICS_ITEM] = cast(JsonValue, per_policy(metrics, self.policies))
        return await loop.store.publish_resources(items)

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
        max_tokens: int | None = DEV_MAX_TOKENS,
        timeout: float | None = DEV_TIMEOUT,
    ) -> list[DevResult]:
        """Run each task once against ``base_url`` (or the algorithm's policy) and print what happened."""
        return event_loop.run(
            self.adev(
                agent,
                dataset,
                base_url=base_url,
                model=model,
                api_key=api_key,
                vllm=vllm,
                max_tokens=max_tokens,
                timeout=timeout,
            )
        )

    async def adev(
        self,
        agent: Agent,
        dataset: Sequence[JsonValue],
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        vllm: bool | None = None,
        max_tokens: int | None = DEV_MAX_TOKENS,
        timeout: float | None = DEV_TIMEOUT,
    ) -> list[DevResult]:
        """:meth:`dev` on the running event loop.

        Each task runs once. A row is printed as each rollout ends, and a table once all have; the
        rollouts stay in the store the table names (``Trainer(store=...)``, else a SQLite file in a
        ``runs/dev-<date>-<time>/`` folder), so an interrupted run keeps the ones that ended and
        ``relight show ROLLOUT --store URL`` reads any of them.

        Args:
            base_url: an OpenAI-compatible endpoint (``https://api.openai.com/v1``, a local vLLM).
            model: the model name the agent is told to use.
            api_key: for ``base_url``; ``OPENAI_API_KEY`` by default.
            vllm: ask the endpoint for vLLM's token ids: by default the gateway finds out whether it
                takes them (see :class:`relight.gateway.OpenAIUpstream`); False never asks.
            max_tokens: the output cap of a call whose request sets none (many frameworks send
                none, and a small model may never stop); None leaves it to the endpoint.
            timeout: seconds a rollout may run before it fails with a timeout (``Trainer(timeout=...)``
                when set wins); None waits for ever.
        """
        upstreams: Sequence[UpstreamTarget | Upstream]
        if base_url is not None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            upstreams = [OpenAIUpstream(base_url, vllm=vllm, api_key=key)]
        elif self.algorithm is not None:
            self._tell_policies(self.algorithm)
            upstreams = await asyncio.to_thread(self.algorithm.upstreams)
        else:
            raise ConfigError("dev() needs base_url=<an OpenAI-compatible endpoint> or a Trainer with an algorithm")
        model = model or (self.algorithm.model if self.algorithm is not None else None)
        if not model:
            raise ConfigError("dev() needs model=<the model name to call>")
        store_url = self.options.store if self.options.store is not None else dev_store_url()
        named = _named(store_url)
        self.console.print(f"relight dev: {len(dataset)} task(s); rollouts kept in {named}", highlight=False)
        gateway = GatewayOptions(self.options.gateway)
        gateway.setdefault("default_max_tokens", max_tokens)
        limit = self.options.timeout if self.options.timeout is not None else timeout
        results: list[DevResult] = []
        routed = base_url is None  # the algorithm's upstreams serve its policies; another endpoint knows none
        async with self._loop(
            agent, upstreams, model, store_url, gateway=gateway, timeout=limit, routed=routed
        ) as loop:
            fixed = await publish_changed(loop.store, self.options.resources) if self.options.resources else None
            version = fixed.version if fixed is not None else None
            requests = [
                RolloutRequest(input=task, mode=Mode.VAL, max_attempts=1, resources_version=version) for task in dataset
            ]
            rollouts = await loop.store.enqueue(requests)
            try:
                async for finished in _as_finished(loop, rollouts):
                    await loop.gateway.flush()
                    results.append(await dev_result(loop.store, finished))
                    self.console.print(dev_row(results[-1]))
            except asyncio.CancelledError:
                self.console.print(
                    f"relight dev: interrupted; {len(results)} of {len(rollouts)} rollout(s) ended, kept in {named}",
                    highlight=False,
                )
                raise
        order = {rollout.rollout_id: index for index, rollout in enumerate(rollouts)}
        results.sort(key=lambda result: order[result.rollout.rollout_id])
        self.console.print(dev_table(results, store=named))
        return results

    # -- shared machinery -------------------------------------------------------------------------

    @asynccontextmanager
    async def _loop(
        self,
        agent: Agent,
        upstreams: Sequence[UpstreamTarget | Upstream],
        model: str,
        store_url: Store | str,
        *,
        gateway: GatewayOptions | None = None,
        timeout: float | None = None,
        routed: bool = True,
    ) -> AsyncGenerator[_Loop]:
        """A store, a gateway in front of ``upstreams`` and runners working on them, for the block's duration.

        ``gateway`` and ``timeout`` replace the trainer's gateway options and attempt timeout (dev mode's);
        ``routed=False`` serves every call as asked even with policies (an endpoint that knows none of them).
        """
        store = open_store(store_url) if isinstance(store_url, str) else store_url
        try:
            async with Gateway(
                store,
                upstreams,
                policy_version=_served_version(self.algorithm),
                policies=self.policies if routed else None,
                model=model,
                **(gateway if gateway is not None else self.options.gateway),
            ) as gateway_server:
                gateway_url = gateway_server.url
                options: dict[str, Any] = {
                    "gateway_url": gateway_url,
                    "model": model,
                    "concurrency": self.options.concurrency,
                    "timeout": timeout if timeout is not None else self.options.timeout,
                    "lease_seconds": self.options.lease_seconds,
                    "heartbeat_seconds": self.options.heartbeat_seconds,
                }
                if self.options.runners is not None:
                    async with self._shared(store, store_url) as shared_url:
                        await asyncio.to_thread(self.options.runners.start, agent, shared_url, **options)
                        try:
                            yield _Loop(store, gateway_server)
                        finally:
                            await asyncio.to_thread(self.options.runners.stop)
                elif self.options.n_runners == 1 and not self.options.runner_process:
                    runner = Runner(agent, store, gateway=gateway_server, **options)
                    running = asyncio.create_task(runner.run())
                    try:
                        yield _Loop(store, gateway_server)
                    finally:
                        runner.stop()
                        await running
                else:
                    async with self._shared(store, store_url) as shared_url:
                        processes = RunnerProcesses(self.options.n_runners, agent, shared_url, **options)
                        processes.start()
                        supervisor = RunnerSupervisor(processes, store, max_restarts=self.options.max_runner_restarts)
                        supervisor.start()
                        try:
                            yield _Loop(store, gateway_server, supervisor)
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

        return beside_run(store, self.options.transitions, upstreams, self.console)

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


def _with_policies(builder: TransitionBuilder, policies: PolicyMap | None) -> TransitionBuilder:
    """``builder``, or a copy of it that trains ``policies`` (``Trainer(policies=...)``)."""
    return builder if policies is None else builder.with_policies(policies)


def _policy_setter(algorithm: Algorithm | SearchAlgorithm) -> Callable[[dict[str, Policy]], object]:
    """The algorithm's ``set_policies``. Raises TypeError naming the algorithm when it has none."""
    setter = getattr(algorithm, "set_policies", None)
    if not callable(setter):
        raise TypeError(
            f"{type(algorithm).__name__} cannot train several policies: it has no set_policies(policies) method. "
            "Train one policy (leave policies out, or use a role filter: TransitionBuilder(roles=...)), or use an "
            "algorithm that trains one per role"
        )
    return cast(Callable[[dict[str, Policy]], object], setter)


def _served_version(algorithm: Algorithm | SearchAlgorithm | None) -> int | None:
    """The policy version the gateway stamps on calls: the trained policy's; none when no weights are trained."""
    return None if algorithm is None or isinstance(algorithm, SearchAlgorithm) else algorithm.policy_version


def _last_step(run: RunFolder) -> int:
    """The last training step the run's metrics file shows (0 when none): how far the killed run had got."""
    return max((int(row.get("step", 0)) for row in run.read_rows() if row["kind"] == "train"), default=0)


def dev_store_url() -> str:
    """A SQLite store in a new ``runs/dev-<date>-<time>/`` folder, so a dev run's rollouts outlive it."""
    folder = default_run_dir()
    folder = folder.with_name(f"dev-{folder.name}")
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(folder / 'store.db').resolve()}"


async def _as_finished(loop: _Loop, rollouts: Sequence[Rollout]) -> AsyncGenerator[Rollout]:
    """Each of ``rollouts`` as it ends (read again from the store), in the order they end."""
    pending = {rollout.rollout_id for rollout in rollouts}
    while pending:
        for rollout in await loop.store.wait(sorted(pending), timeout=0.5):
            if rollout.is_finished and rollout.rollout_id in pending:
                pending.discard(rollout.rollout_id)
                yield rollout
        if loop.supervisor is not None:
            loop.supervisor.check()


def _without_password(url: str) -> str:
    """A store URL fit to send to a third-party tracker: ``postgresql://user:***@host/db``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


def _named(store: Store | str) -> str:
    return store if isinstance(store, str) else type(store).__name__
