"""What the synchronous and asynchronous training loops share: what they work on, enqueue and report.

Both loops work on the store, gateway and algorithm the trainer set up, with the hooks it lends
them (:class:`LoopHooks`: publishing, checkpoints, validation, progress lines). Of the gateway they
need only what :class:`GatewayControl` names: its spans flushed, and calls held while the weights
change. Both name a task's group ``step<n>-task<i>`` (so a run's groups line up whichever loop ran
it), enqueue ``n_samples`` rollouts per group, and report a step's metrics under the same names in
the same order: the ones the synchronous loop reports first, then each loop's own.

A training rollout's id is ``<run id>-<group>-s<sample>``: enqueueing a step again after a crash
hands back the rollouts already in the store instead of sampling them twice (see
:mod:`relight.training.resume`). Each loop says where it stands in the task stream
(:meth:`TrainingLoop.position`), which checkpoints keep, and takes it up again (``run(..., resume=...)``).
"""

from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from pydantic import JsonValue

from relight.algorithm import Algorithm, policy_versions
from relight.records import Resources, Rollout, RolloutRequest, RolloutStatus, Transition
from relight.rewards.group import GroupRewards
from relight.store import Store
from relight.training.options import TrainerOptions
from relight.transitions.builder import TransitionBuilder

__all__ = [
    "GatewayControl",
    "LoopHooks",
    "PolicyCounts",
    "Resume",
    "TrainingLoop",
    "group_id",
    "group_requests",
    "step_metrics",
]


class GatewayControl(Protocol):
    """What a training loop needs of the gateway in front of the policy (:class:`relight.gateway.Gateway` is one)."""

    async def flush(self) -> None:
        """Return once the span of every call answered so far is in the store."""
        ...

    def paused(self) -> AbstractAsyncContextManager[None]:
        """No call is in flight inside the block, so the weights can change; held calls go on after it."""
        ...


@dataclass(frozen=True, slots=True)
class LoopHooks:
    """What the trainer lends the loop, so both loops publish, checkpoint, log and validate alike."""

    publish: Callable[[Mapping[str, float]], Awaitable[Resources]]
    """Serve and publish the algorithm's current policy, with the metrics of the update that made it."""
    returns: Callable[[Sequence[Rollout]], Awaitable[list[float]]]
    finish_step: Callable[[dict[str, float], Resources], Awaitable[dict[str, float]]]
    """After an update: checkpoint, metrics file, validation on schedule; returns the step's metrics."""
    report: Callable[[Mapping[str, float]], None]
    """The progress line of a step."""


class TrainingLoop(ABC):
    """One :meth:`relight.Trainer.fit`'s training loop over the store and gateway the trainer set up."""

    def __init__(
        self,
        store: Store,
        gateway: GatewayControl,
        algorithm: Algorithm,
        options: TrainerOptions,
        hooks: LoopHooks,
        *,
        run_id: str | None = None,
        rewards: GroupRewards | None = None,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.algorithm = algorithm
        self.options = options
        self.builder = options.transitions
        self.hooks = hooks
        self.run_id = run_id
        """Prefixes training rollout ids, so the rollouts of a step done again are found in the store."""
        self.rewards = rewards or GroupRewards()
        """Group rewards (a judge) scored on each finished group before its transitions are built."""

    @abstractmethod
    async def run(
        self, dataset: Sequence[JsonValue], resources: Resources, *, resume: Resume | None = None
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        """Train over ``epochs`` passes of ``dataset``, from ``resume`` when given; returns the last step,
        resources and each step's metrics (those of this call)."""

    @abstractmethod
    def position(self) -> dict[str, JsonValue]:
        """Where the loop stands in the task stream after the last update: what a checkpoint keeps."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a loop goes on from: the last step a checkpoint holds and the loop's :meth:`TrainingLoop.position` then."""

    step: int
    position: Mapping[str, JsonValue]


def group_id(step: int, position: int) -> str:
    """The group of the task at ``position`` in step ``step``'s batch."""
    return f"step{step}-task{position}"


def group_requests(
    task: JsonValue,
    group: str,
    *,
    step: int,
    n_samples: int,
    max_attempts: int,
    resources: Resources,
    run_id: str | None = None,
) -> list[RolloutRequest]:
    """The ``n_samples`` rollouts of one task's group, sampled by the policy ``resources`` publish.

    With ``run_id`` each has the id ``<run_id>-<group>-s<sample>``, so enqueueing them again is idempotent.
    """
    return [
        RolloutRequest(
            input=task,
            group_id=group,
            max_attempts=max_attempts,
            resources_version=resources.version,
            metadata={"step": step, "sample": sample},
            rollout_id=f"{run_id}-{group}-s{sample}" if run_id is not None else None,
        )
        for sample in range(n_samples)
    ]


def step_metrics(
    step: int,
    learned: Mapping[str, float],
    policy_version: int,
    rollouts: Sequence[Rollout],
    transitions: Sequence[Transition],
    returns: Sequence[float],
    *,
    time_rollouts_s: float,
    time_update_s: float,
    counts: Mapping[str, float] | None = None,
    policies: PolicyCounts | None = None,
) -> dict[str, float]:
    """A step's metrics: the algorithm's (``learned``), then what it trained on and how long it took.

    ``counts`` (the synchronous loop's groups and sampling rounds) stand after the transitions. With
    several policies, ``policies`` adds per policy (``<metric>/<policy>``) what the algorithm did not
    report itself: ``transitions/<p>`` (its calls handed to this update), ``reward/<p>`` (their mean
    credited reward), ``policy_version/<p>`` and ``calls_left_out/<p>`` (its calls left out so far in the run).
    """
    metrics = {
        "step": step,
        **{key: float(value) for key, value in learned.items()},
        "policy_version": policy_version,
        "rollouts": len(rollouts),
        "rollouts_failed": sum(r.status is not RolloutStatus.SUCCEEDED for r in rollouts),
        "transitions": len(transitions),
        **(counts or {}),
        "reward_mean": statistics.fmean(returns) if returns else 0.0,
        "time_rollouts_s": time_rollouts_s,
        "time_update_s": time_update_s,
    }
    if policies is not None:
        for name in policies.names:
            own = [t.reward for t in transitions if t.policy == name]
            found = {
                "transitions": float(len(own)),
                "reward": statistics.fmean(own) if own else None,
                "policy_version": policies.versions.get(name),
                "calls_left_out": float(policies.left_out.get(name, 0)),
            }
            for metric, value in found.items():
                if value is not None:
                    metrics.setdefault(f"{metric}/{name}", float(value))
    return metrics


@dataclass(frozen=True, slots=True)
class PolicyCounts:
    """What :func:`step_metrics` reports per policy in a run with several: their names, the algorithm's
    ``policy_versions`` and the builder's running count of calls left out."""

    names: Sequence[str]
    versions: Mapping[str, int]
    left_out: Mapping[str, int]

    @classmethod
    def of(cls, builder: TransitionBuilder, algorithm: object) -> PolicyCounts | None:
        if builder.policies is None:
            return None
        return cls(list(builder.policies), policy_versions(algorithm) or {}, dict(builder.left_out))
