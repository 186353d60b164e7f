"""One ``Trainer.fit``: the run folder, the services, and what the trainer lends the training loop.

Each step enqueues ``batch_size`` tasks ``n_samples`` times each (the samples of a task share a group,
for GRPO), waits for them, turns them into transitions (:class:`relight.TransitionBuilder`) and hands
those to ``algorithm.update`` while the gateway is paused, then publishes the new policy version: the
loop of :mod:`relight.training.sync_loop`, or of :mod:`relight.training.async_loop` with
``max_staleness``. A :class:`FitRun` sets up the store, gateway and runners both loops work on
(:mod:`relight.training.services`) and lends them publishing, checkpoints and validation, which runs
before the first update (``val_before_fit``), every ``val_every`` steps and at the end.

Every fit writes a run folder (``run_dir``, ``runs/<date>-<time>`` by default; see
:mod:`relight.training.run_folder`): metrics, summary, reward curve, checkpoints and, by default, the
store. Progress shows as a live bar on a terminal and as plain lines in a log
(:mod:`relight.training.progress`).

A run killed before it finished is resumed by running the same ``fit`` with the same ``run_dir``
again: from its last whole checkpoint, at the same place in the task stream, with the same metrics
file (see :mod:`relight.training.resume`).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit, urlunsplit

from pydantic import JsonValue

from relight.agent import Agent
from relight.algorithm import Algorithm, UpstreamTarget, algorithm_settings, policy_setter, policy_versions
from relight.errors import NotFoundError
from relight.gateway import Upstream
from relight.policies import Policy, per_policy
from relight.records import Mode, Resources, Rollout, RolloutRequest, RolloutStatus
from relight.rewards.group import GroupRewards
from relight.store import Store
from relight.tracking import LoggerSet, RunInfo, resolve_loggers
from relight.training.async_loop import AsyncTraining
from relight.training.loop import LoopHooks, Resume, TrainingLoop
from relight.training.options import TrainerOptions
from relight.training.progress import RunProgress
from relight.training.resume import Checkpoints, RunIdentity, RunRecord
from relight.training.role_check import RoleCheck
from relight.training.run_folder import RunFolder, default_run_dir
from relight.training.search import SearchAlgorithm
from relight.training.services import RunnerSettings, RunServices, ServiceSettings, run_services
from relight.training.sync_loop import SyncTraining
from relight.transitions.builder import episode_return, last_attempt_spans
from relight.transitions.run_config import POLICY_METRICS_ITEM, POLICY_VERSIONS_ITEM, TRANSITIONS_ITEM, describe

__all__ = ["FitRun", "dashboard_beside", "open_run", "run_settings", "store_name", "wait_for_batch"]


class FitRun:
    """One :meth:`relight.Trainer.fit` of ``algorithm`` with ``options``, from its run folder to its summary."""

    def __init__(self, options: TrainerOptions, algorithm: Algorithm) -> None:
        self.options = options
        self.algorithm = algorithm
        self.progress = RunProgress(options.console, every=options.progress_every)
        self.role_check = RoleCheck(options.transitions.roles, policies=options.transitions.policies)

    async def run(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """Train the algorithm's policy on the agent's rollouts; returns each step's metrics."""
        options, algorithm = self.options, self.algorithm
        history: list[dict[str, float]] = []
        run, store, record = open_run(
            options,
            agent,
            algorithm,
            train_dataset,
            self.progress,
            max_staleness=options.max_staleness,
            policies=options.transitions.policies,
        )
        checkpoints = Checkpoints(_path(options.checkpoint_dir) or run.checkpoints, warn=self.progress.warn)
        tell_policies(options, algorithm)
        resume: Resume | None = None
        if record.resumed:
            resume, history = await self._resume(run, checkpoints)
        ended = "failed"
        try:
            # On a worker thread, like save(): relight-verl starts its whole cluster in upstreams().
            upstreams = await asyncio.to_thread(algorithm.upstreams)
            settings = ServiceSettings(
                store=store,
                upstreams=upstreams,
                model=algorithm.model,
                policy_version=algorithm.policy_version,
                policies=options.transitions.policies,
                gateway=options.gateway,
                runners=RunnerSettings.of(options, timeout=options.timeout),
            )
            async with run_services(agent, settings) as services, self._dashboard(services.store, upstreams, dashboard):
                resources = await self._publish(services)
                if val_dataset:
                    await self._first_validation(services, run, val_dataset, resources, resume, history)
                step, resources, steps = await self._train(
                    services, run, checkpoints, record.run_id, train_dataset, val_dataset, resources, resume
                )
                history += steps
                if val_dataset and not self._validation_due(step):
                    history.append(await self._validate(services, val_dataset, resources, step))
                    run.record("val", history[-1])
                    self.progress.step(history[-1])
            ended = "finished"
        finally:
            summary: dict[str, JsonValue] = {"status": ended, "policy_version": algorithm.policy_version}
            if (versions := policy_versions(algorithm)) is not None:
                summary[POLICY_VERSIONS_ITEM] = dict(versions)
            run.write_summary({**summary, "store": store_name(store)})
            self.progress.note(f"relight: run {ended}; metrics, summary and reward curve in {run.path}")
        return history

    async def _train(
        self,
        services: RunServices,
        run: RunFolder,
        checkpoints: Checkpoints,
        run_id: str,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None,
        resources: Resources,
        resume: Resume | None,
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        """The training loop over ``train_dataset``, lent publishing, checkpoints, metrics and validation."""
        algorithm, options = self.algorithm, self.options
        training: TrainingLoop | None = None
        saved = [algorithm.policy_version]

        async def finish_step(metrics: dict[str, float], resources: Resources) -> dict[str, float]:
            """After an update: a checkpoint if the weights changed, metrics, validation on schedule."""
            step = int(metrics["step"])
            if algorithm.policy_version != saved[0]:  # a skipped update leaves no checkpoint
                position = training.position() if training is not None else {}
                await asyncio.to_thread(checkpoints.save, step, algorithm, loop=position, metrics=metrics)
                saved[0] = algorithm.policy_version
                if options.checkpoint_dir is None:
                    run.prune_checkpoints()
            run.record("train", metrics)
            if val_dataset and self._validation_due(step):
                validation = await self._validate(services, val_dataset, resources, step)
                run.record("val", validation)
                metrics |= validation
            return metrics

        hooks = LoopHooks(
            publish=lambda metrics: self._publish(services, metrics),
            returns=lambda rollouts: _returns(services.store, rollouts),
            finish_step=finish_step,
            report=self.progress.step,
        )
        training = self._training_loop(services, hooks, run_id)
        return await training.run(train_dataset, resources, resume=resume)

    def _training_loop(self, services: RunServices, hooks: LoopHooks, run_id: str) -> TrainingLoop:
        """The synchronous loop, or the asynchronous one when ``max_staleness`` is set."""
        options = self.options
        if options.max_staleness is not None:
            return AsyncTraining(
                services.store,
                services.gateway,
                self.algorithm,
                options,
                hooks,
                progress=self.progress,
                run_id=run_id,
                rewards=GroupRewards(options.group_rewards),
            )

        async def run_batch(requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
            return await self.run_batch(services, requests, label, check_roles=True)

        return SyncTraining(
            services.store,
            services.gateway,
            self.algorithm,
            options,
            hooks,
            run_batch=run_batch,
            warn=self.progress.warn,
            run_id=run_id,
            rewards=GroupRewards(options.group_rewards),
        )

    async def _resume(self, run: RunFolder, checkpoints: Checkpoints) -> tuple[Resume, list[dict[str, float]]]:
        """Load the newest whole checkpoint and the metrics up to it; at step 0 (the algorithm as made) when none is."""
        algorithm = self.algorithm
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
        services: RunServices,
        run: RunFolder,
        dataset: Sequence[JsonValue],
        resources: Resources,
        resume: Resume | None,
        history: list[dict[str, float]],
    ) -> None:
        """Validation before the first update, or on resuming the one the killed run died before."""
        if resume is None:
            if self._validation_due(0):
                history.append(await self._validate(services, dataset, resources, step=0))
                run.record("val", history[-1])
            return
        if not self._validation_missing(resume.step, history):
            return
        validation = await self._validate(services, dataset, resources, resume.step)
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

    async def _validate(
        self, services: RunServices, dataset: Sequence[JsonValue], resources: Resources, step: int
    ) -> dict[str, float]:
        requests = [
            RolloutRequest(
                input=task, mode=Mode.VAL, max_attempts=self.options.max_attempts, resources_version=resources.version
            )
            for task in dataset
        ]
        rollouts = await self.run_batch(services, requests, f"val @ step {step}")
        await services.gateway.flush()
        returns = await _returns(services.store, rollouts)
        succeeded = sum(r.status is RolloutStatus.SUCCEEDED for r in rollouts)
        # val_completed_rate: the share of validation rollouts that ran to the end without an error,
        # whatever reward they earned (the reward is val_reward_mean's).
        return {
            "step": step,
            "val_reward_mean": statistics.fmean(returns) if returns else 0.0,
            "val_completed_rate": succeeded / len(rollouts),
        }

    async def _publish(self, services: RunServices, metrics: Mapping[str, float] | None = None) -> Resources:
        """Make the algorithm's current policy the served and published one.

        A version is published only when it differs from the last one the store holds (an update that
        changed no weights, or a resumed run, publishes nothing), so resources versions, policy versions
        and the dashboard's versions stay one count. The items also say how the run turns calls into
        transitions (:func:`relight.transitions.run_config.describe`), so ``relight show`` and the
        dashboard judge calls as the run did. With several policies a version also carries each
        policy's version and what the update that made it reported per policy (``metrics``' keys
        ``<metric>/<policy>``: loss, reward, calls trained and left out), which the dashboard shows.
        """
        algorithm, policies = self.algorithm, self.options.transitions.policies
        services.gateway.policy_version = algorithm.policy_version
        items: dict[str, JsonValue] = {
            "model": algorithm.model,
            "policy_version": algorithm.policy_version,
            TRANSITIONS_ITEM: describe(self.options.transitions),
            **(self.options.resources or {}),
            **algorithm.resources(),
        }
        versions = policy_versions(algorithm)
        if versions is not None:
            items[POLICY_VERSIONS_ITEM] = dict(versions)
        try:
            latest = await services.store.get_resources()
        except NotFoundError:
            latest = None
        if latest is not None and {k: v for k, v in latest.items.items() if k != POLICY_METRICS_ITEM} == items:
            return latest
        if metrics is not None and policies is not None:
            items[POLICY_METRICS_ITEM] = cast(JsonValue, per_policy(metrics, policies))
        return await services.store.publish_resources(items)

    async def run_batch(
        self, services: RunServices, requests: Sequence[RolloutRequest], label: str, *, check_roles: bool = False
    ) -> list[Rollout]:
        """Enqueue rollouts and wait for all of them, showing progress (and checking the role filter early)."""
        return await wait_for_batch(
            services, self.progress, requests, label, role_check=self.role_check if check_roles else None
        )

    def _dashboard(
        self, store: Store, upstreams: Sequence[UpstreamTarget | Upstream], wanted: bool
    ) -> AbstractAsyncContextManager[object]:
        return dashboard_beside(self.options, store, upstreams, wanted)


def open_run(
    options: TrainerOptions,
    agent: Agent,
    algorithm: Algorithm | SearchAlgorithm,
    tasks: Sequence[JsonValue],
    progress: RunProgress,
    *,
    max_staleness: int | None,
    policies: Mapping[str, Policy] | None = None,
) -> tuple[RunFolder, Store | str, RunRecord]:
    """A fit's run folder (its record opened: a new run, or the killed one resumed), its store and trackers
    started, and where they are said; shared by training and search."""
    trackers = LoggerSet(resolve_loggers(options.loggers))
    run = RunFolder(_path(options.run_dir) or default_run_dir(), loggers=trackers)
    identity = RunIdentity.of(
        agent,
        algorithm,
        batch_size=options.batch_size,
        n_samples=options.n_samples,
        epochs=options.epochs,
        max_staleness=max_staleness,
        tasks=tasks,
        policies=policies,
    )
    store = options.store if options.store is not None else run.store_url
    config = run_settings(options, algorithm, store)
    record = RunRecord.open(run.path, identity, settings=config)
    for tracker, link in trackers.start(RunInfo(run.path.name, run.path, config)):
        progress.note(f"relight: {tracker} run at {link}")
    progress.note(f"relight: run folder {run.path}  (store {store_name(store)})")
    return run, store, record


async def wait_for_batch(
    services: RunServices,
    progress: RunProgress,
    requests: Sequence[RolloutRequest],
    label: str,
    *,
    role_check: RoleCheck | None = None,
) -> list[Rollout]:
    """Enqueue rollouts and wait for all of them, showing progress (and checking the role filter early)."""
    rollouts = await services.store.enqueue(requests)
    ids = [rollout.rollout_id for rollout in rollouts]
    latest = {rollout.rollout_id: rollout for rollout in rollouts}
    with progress.batch(label, len(ids), calls=lambda: services.gateway.stats.calls) as bar:
        while True:
            # A finished rollout never changes again: only the others are waited on (and read again).
            pending = [rollout_id for rollout_id, rollout in latest.items() if not rollout.is_finished]
            latest.update((rollout.rollout_id, rollout) for rollout in await services.store.wait(pending, timeout=0.5))
            rollouts = [latest[rollout_id] for rollout_id in ids]
            if (health := services.runners_health()) is not None:
                progress.health = health
            bar.update(rollouts)
            if role_check is not None and not role_check.decided:
                await services.gateway.flush()
                await role_check.check(services.store, rollouts)
            if all(rollout.is_finished for rollout in rollouts):
                return rollouts


def run_settings(
    options: TrainerOptions, algorithm: Algorithm | SearchAlgorithm, store: Store | str
) -> dict[str, JsonValue]:
    """The run's settings as experiment trackers show them (and ``run.json`` keeps them)."""
    policies = options.transitions.policies
    checkpoint_dir = _path(options.checkpoint_dir)
    return {
        "algorithm": type(algorithm).__name__,
        "model": str(algorithm.model),
        "store": _without_password(store_name(store)),
        "batch_size": options.batch_size,
        "n_samples": options.n_samples,
        "epochs": options.epochs,
        "val_every": options.val_every,
        "val_before_fit": options.val_before_fit,
        "max_staleness": options.max_staleness,
        "concurrency": options.concurrency,
        "n_runners": options.n_runners,
        "max_attempts": options.max_attempts,
        "dynamic_sampling": options.dynamic_sampling,
        "checkpoint_dir": str(checkpoint_dir.resolve()) if checkpoint_dir else None,
        "roles": str(options.transitions.roles) if options.transitions.roles is not None else None,
        "policies": {name: policy.describe() for name, policy in policies.items()} if policies else None,
        **{f"algorithm.{name}": value for name, value in algorithm_settings(algorithm).items()},
    }


def dashboard_beside(
    options: TrainerOptions, store: Store, upstreams: Sequence[UpstreamTarget | Upstream], wanted: bool
) -> AbstractAsyncContextManager[object]:
    """``relight dashboard`` of the run's store while it runs, when ``wanted`` (``fit(dashboard=True)``)."""
    if not wanted:
        return nullcontext()
    from relight.dashboard.server import beside_run  # the web app loads only when asked for

    return beside_run(store, options.transitions, upstreams, options.console)


def tell_policies(options: TrainerOptions, algorithm: Algorithm | SearchAlgorithm) -> None:
    """Hand the run's policies to the algorithm before it serves (and before a checkpoint is loaded)."""
    if options.transitions.policies is not None:
        policy_setter(algorithm)(dict(options.transitions.policies))


def store_name(store: Store | str) -> str:
    """How a run names its store: the URL it was given, or the class of the store object."""
    return store if isinstance(store, str) else type(store).__name__


async def _returns(store: Store, rollouts: Sequence[Rollout]) -> list[float]:
    """Each succeeded rollout's return (the sum of its last attempt's rewards; 0 when it had none)."""
    returns: list[float] = []
    for rollout in rollouts:
        if rollout.status is RolloutStatus.SUCCEEDED:
            returns.append(episode_return(await last_attempt_spans(store, rollout.rollout_id)) or 0.0)
    return returns


def _last_step(run: RunFolder) -> int:
    """The last training step the run's metrics file shows (0 when none): how far the killed run had got."""
    return max((int(row.get("step", 0)) for row in run.read_rows() if row["kind"] == "train"), default=0)


def _without_password(url: str) -> str:
    """A store URL fit to send to a third-party tracker: ``postgresql://user:***@host/db``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None
