"""Synchronous training: each step samples a batch, waits for all of it, then updates.

``Trainer().fit(...)`` (no ``max_staleness``) runs this loop. A step enqueues ``batch_size`` tasks
``n_samples`` times each (the samples of a task share a group, for GRPO), waits for every rollout,
turns them into transitions and hands those to ``algorithm.update`` while the gateway is paused, so
no call is served by weights that are changing. The trainer's group rewards (a judge model,
:mod:`relight.rewards`) score every group, all at once, between the rollouts' end and the
transitions; a task sampled again is scored as its new samples alone. With ``dynamic_sampling`` it
first samples again, at most that many rounds, the tasks whose group has no learning signal
(:mod:`relight.training.dynamic_sampling`).
Publishing, checkpoints, the metrics file and validation are the trainer's, lent through
:class:`relight.training.loop.LoopHooks` exactly as to the asynchronous loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from pydantic import JsonValue

from relight.algorithm import Algorithm
from relight.records import Resources, Rollout, RolloutRequest, Transition
from relight.rewards.group import GroupRewards
from relight.store import Store
from relight.training.dynamic_sampling import flat_groups, no_signal_warning, sample_until_signal
from relight.training.loop import (
    GatewayControl,
    LoopHooks,
    PolicyCounts,
    Resume,
    TrainingLoop,
    group_id,
    group_requests,
    step_metrics,
)
from relight.training.options import TrainerOptions
from relight.transitions.learning_signal import group_key
from relight.transitions.trained_calls import record_update

__all__ = ["RunBatch", "SyncTraining"]

RunBatch = Callable[[Sequence[RolloutRequest], str], Awaitable[list[Rollout]]]
"""Enqueue rollouts and wait for all of them, showing progress under a label (the trainer's)."""


class SyncTraining(TrainingLoop):
    """One synchronous :meth:`relight.Trainer.fit` over a store and gateway the trainer set up."""

    def __init__(
        self,
        store: Store,
        gateway: GatewayControl,
        algorithm: Algorithm,
        options: TrainerOptions,
        hooks: LoopHooks,
        *,
        run_batch: RunBatch,
        warn: Callable[[str], None],
        run_id: str | None = None,
        rewards: GroupRewards | None = None,
    ) -> None:
        super().__init__(store, gateway, algorithm, options, hooks, run_id=run_id, rewards=rewards)
        self.run_batch = run_batch
        self.warn = warn
        self._step = 0

    async def run(
        self, dataset: Sequence[JsonValue], resources: Resources, *, resume: Resume | None = None
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        """Train over ``epochs`` passes of ``dataset``; returns the last step, resources and each step's metrics.

        The step number is the position in the task stream: resuming after step ``n`` starts with step ``n + 1``.
        """
        history: list[dict[str, float]] = []
        step, size = 0, self.options.batch_size
        done = resume.step if resume is not None else 0
        for epoch in range(self.options.epochs):
            for start in range(0, len(dataset), size):
                step += 1
                if step <= done:
                    continue
                metrics = await self.step(dataset[start : start + size], resources, step)
                metrics["epoch"] = epoch
                resources = await self.hooks.publish(metrics)
                self._step = step
                history.append(await self.hooks.finish_step(metrics, resources))
                self.hooks.report(metrics)
        return step, resources, history

    def position(self) -> dict[str, JsonValue]:
        """The last step trained: it alone says which tasks of which epoch come next."""
        return {"step": self._step}

    async def step(self, batch: Sequence[JsonValue], resources: Resources, step: int) -> dict[str, float]:
        """Sample ``batch`` (again where a group has no signal, if asked), update, and return the step's metrics."""
        options = self.options
        requests = [
            request
            for index, task in enumerate(batch)
            for request in group_requests(
                task,
                group_id(step, index),
                step=step,
                n_samples=options.n_samples,
                max_attempts=options.max_attempts,
                resources=resources,
                run_id=self.run_id,
            )
        ]
        began = time.perf_counter()

        async def run(requests: Sequence[RolloutRequest]) -> list[Rollout]:
            return await self.run_batch(requests, f"step {step}")

        async def build(rollouts: Sequence[Rollout]) -> list[Transition]:
            await self.gateway.flush()
            await self.rewards.apply(self.store, rollouts)
            return await self.builder.from_store(self.store, rollouts)

        rollouts, transitions, rounds = await sample_until_signal(requests, run, build, rounds=options.dynamic_sampling)
        groups, flat = len({group_key(t) for t in transitions}), len(flat_groups(transitions))
        if groups and flat == groups:
            self.warn(no_signal_warning(step, transitions, dynamic_sampling=options.dynamic_sampling))
        rolled = time.perf_counter()
        before = self.algorithm.policy_version
        async with self.gateway.paused():
            learned = await self.algorithm.update(transitions)
        updated = time.perf_counter()
        await record_update(self.store, self.algorithm, transitions, version_before=before)
        return (
            step_metrics(
                step,
                learned,
                self.algorithm.policy_version,
                rollouts,
                transitions,
                await self.hooks.returns(rollouts),
                time_rollouts_s=rolled - began,
                time_update_s=updated - rolled,
                counts={"groups": groups, "groups_no_signal": flat, "sampling_rounds": rounds},
                policies=PolicyCounts.of(self.builder, self.algorithm),
            )
            | self.rewards.take_metrics()
        )
