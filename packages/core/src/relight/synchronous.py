"""Synchronous training: each step samples a batch, waits for all of it, then updates.

``Trainer().fit(...)`` (no ``max_staleness``) runs this loop. A step enqueues ``batch_size`` tasks
``n_samples`` times each (the samples of a task share a group, for GRPO), waits for every rollout,
turns them into transitions and hands those to ``algorithm.update`` while the gateway is paused, so
no call is served by weights that are changing. The trainer's group rewards (a judge model,
:mod:`relight.rewards`) score every group, all at once, between the rollouts' end and the
transitions; a task sampled again is scored as its new samples alone. With ``dynamic_sampling`` it
first samples again, at most that many rounds, the tasks whose group has no learning signal
(:mod:`relight.signal`).
Publishing, checkpoints, the metrics file and validation are the trainer's, lent through
:class:`relight.steps.LoopHooks` exactly as to the asynchronous loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from relight.algorithm import Algorithm
from relight.gateway import Gateway
from relight.models import Resources, Rollout, RolloutRequest, Transition
from relight.rewards.group import GroupRewards
from relight.signal import flat_groups, sample_until_signal
from relight.steps import LoopHooks, TrainingLoop, group_id, group_requests, step_metrics
from relight.store import Store
from relight.trained import record_trained
from relight.transitions import TransitionBuilder

__all__ = ["RunBatch", "SyncOptions", "SyncTraining"]

RunBatch = Callable[[Sequence[RolloutRequest], str], Awaitable[list[Rollout]]]
"""Enqueue rollouts and wait for all of them, showing progress under a label (the trainer's)."""


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """The trainer's settings the synchronous loop uses."""

    batch_size: int
    n_samples: int
    epochs: int
    max_attempts: int
    dynamic_sampling: int = 0


class SyncTraining(TrainingLoop):
    """One synchronous :meth:`relight.Trainer.fit` over a store and gateway the trainer set up."""

    def __init__(
        self,
        store: Store,
        gateway: Gateway,
        algorithm: Algorithm,
        transitions: TransitionBuilder,
        options: SyncOptions,
        hooks: LoopHooks,
        *,
        run_batch: RunBatch,
        warn: Callable[[str], None],
        rewards: GroupRewards | None = None,
    ) -> None:
        super().__init__(store, gateway, algorithm, transitions, hooks, rewards=rewards)
        self.options = options
        self.run_batch = run_batch
        self.warn = warn

    async def run(
        self, dataset: Sequence[JsonValue], resources: Resources
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        """Train over ``epochs`` passes of ``dataset``; returns the last step, resources and each step's metrics."""
        history: list[dict[str, float]] = []
        step, size = 0, self.options.batch_size
        for epoch in range(self.options.epochs):
            for start in range(0, len(dataset), size):
                step += 1
                metrics = await self.step(dataset[start : start + size], resources, step)
                metrics["epoch"] = epoch
                resources = await self.hooks.publish()
                history.append(await self.hooks.finish_step(metrics, resources))
                self.hooks.report(metrics)
        return step, resources, history

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
        groups, flat = len({t.group_id for t in transitions}), len(flat_groups(transitions))
        if groups and flat == groups:
            self.warn(
                f"step {step}: all {groups} group(s) have equal rewards, so there is no learning signal this "
                "step (GRPO skips such groups); Trainer(dynamic_sampling=N) samples flat tasks again"
            )
        rolled = time.perf_counter()
        async with self.gateway.paused():
            learned = await self.algorithm.update(transitions)
        updated = time.perf_counter()
        await record_trained(self.store, self.algorithm, transitions, self.algorithm.policy_version)
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
            )
            | self.rewards.take_metrics()
        )
