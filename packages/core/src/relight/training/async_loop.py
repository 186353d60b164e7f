"""Asynchronous training with bounded staleness: rollouts keep running while the algorithm updates.

``Trainer(max_staleness=k).fit(...)`` runs this loop instead of the synchronous one. Its rules:

* **Admission.** Groups (a task's ``n_samples`` rollouts) are enqueued while fewer than
  ``batch_size × (updates + k + 1)`` have been admitted (not counting those dropped or aged out),
  so at most ``batch_size × (k + 1)`` are ahead of the learner: AReaL's rule, which bounds
  staleness by construction when groups finish in order. ``k = 0`` admits one batch, waits for
  it, updates, and admits the next: the synchronous loop, batch for batch (except that an epoch's
  last, partial batch is topped up with the next epoch's first tasks, which the synchronous loop
  trains as a smaller batch).
* **Batches.** A batch is ``batch_size`` whole finished groups, taken in the order they were seen to
  finish (groups seen in the same look in the order they were admitted; the last batch may be
  smaller) and handed over in the order they were admitted. A group is never split.
* **Staleness.** A transition's staleness is the policy version being updated less the version that
  sampled it (for a call whose tokens came from two versions, the older: see the engine's
  ``policy_version_segments``). A group holding a transition more than ``k`` versions behind is
  dropped whole when a batch is formed, counted (``groups_dropped_stale``,
  ``transitions_dropped_stale``) and marked in the store with a ``relight.dropped`` annotation span
  (:mod:`relight.transitions.drops`), so a dashboard can say why it was never trained on. With
  ``resample_stale`` its task is sampled again, first in line, by the current policy
  (``groups_resampled``; the new group's id ends in ``-resample<n>``).
* **Aging out.** A group still unfinished when the policy has moved more than ``k`` versions past
  the version it was admitted under, or after ``group_timeout`` seconds, is cancelled and counted
  (``groups_aged_out``): a hanging agent holds one admission slot for a while, never the learner.
* **Resuming.** A checkpoint keeps the tasks trained, dropped or aged out so far, how often each
  task was sampled again, and the run's counts. A resumed loop admits every other task in its
  usual order under its usual group id; rollouts of it already in the store are taken as they
  are, and a group among them more than ``k`` versions behind is dropped as above, so the
  staleness bound holds across the restart.
* **Group rewards.** A finished group is scored by the trainer's group rewards (a judge) in a task of
  its own and joins the batches once scored: a slow judge delays its own group, never the others,
  the admissions or the learner.
* **Updates.** An algorithm whose ``live_updates`` is true (relight-torch's engine swapping weights
  between generation steps) is updated while calls are served; any other is updated with the
  gateway paused, as in the synchronous loop, while its agents' tools and queued work go on.

The loop looks at every in-flight rollout in one store query every ``POLL_SECONDS`` (and at once
when an update returns), rather than keeping a waiter per group: a store wakes every waiter at each
change, so with ``batch_size × (k + 1)`` groups in flight the per-group waiters' queries cost more
CPU than the runner that makes the changes.

Each update's metrics add the asynchronous ones to the synchronous loop's: rollouts/s, updates/s,
samples per update, the staleness histogram (``staleness_<d>``), drops, and the idle time of the
learner (waiting for a batch) and of the runners (no training rollout in flight).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue

from relight.algorithm import Algorithm
from relight.errors import ConfigError
from relight.records import Resources, Rollout, Transition
from relight.rewards.group import GroupRewards
from relight.store import Store
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
from relight.training.progress import ProgressCount, RunProgress
from relight.transitions.drops import DropReason, mark_dropped
from relight.transitions.trained_calls import record_update

__all__ = ["POLL_SECONDS", "AsyncTraining", "LoopHooks"]

POLL_SECONDS = 0.1
"""How often the loop looks for finished groups: a group takes seconds, a look costs one query."""


@dataclass(frozen=True, slots=True)
class _Task:
    """A task waiting for admission, with the step and position the synchronous loop would give it."""

    epoch: int
    step: int
    position: int
    input: JsonValue
    resampled: int = 0
    """How many of its groups were dropped as stale and sampled again."""

    @property
    def key(self) -> tuple[int, int]:
        """Which task of which batch it is, whatever its resampling: what a checkpoint records as done."""
        return (self.step, self.position)

    @property
    def group_id(self) -> str:
        """Named as the synchronous loop names it, plus how often it was sampled again."""
        suffix = f"-resample{self.resampled}" if self.resampled else ""
        return group_id(self.step, self.position) + suffix


@dataclass(eq=False)
class _Group:
    """One task's rollouts, from admission until trained on, dropped or aged out."""

    index: int
    task: _Task
    group_id: str
    rollout_ids: list[str]
    version: int
    """The policy version when it was admitted."""
    admitted_at: float
    rollouts: list[Rollout] = field(default_factory=list[Rollout])
    transitions: list[Transition] = field(default_factory=list[Transition])

    def staleness(self, version: int) -> int:
        """How far behind ``version`` its oldest transition is (one without a version counts as admitted)."""
        oldest = min((t.policy_version for t in self.transitions if t.policy_version is not None), default=None)
        return version - (self.version if oldest is None else oldest)


@dataclass(slots=True)
class _Totals:
    """Counts over the whole run, for rates and idle fractions."""

    began: float
    rollouts: int = 0
    groups_trained: int = 0
    groups_dropped_stale: int = 0
    transitions_dropped_stale: int = 0
    groups_aged_out: int = 0
    groups_resampled: int = 0
    learner_idle: float = 0.0
    runner_idle: float = 0.0

    @property
    def discarded(self) -> int:
        """Groups admitted but never to be trained on: they free their admission slot."""
        return self.groups_dropped_stale + self.groups_aged_out


_COUNTED = (
    "rollouts",
    "groups_trained",
    "groups_dropped_stale",
    "transitions_dropped_stale",
    "groups_aged_out",
    "groups_resampled",
)
"""The counts of :class:`_Totals` a checkpoint keeps, so a resumed run's totals go on from them."""


def _pairs(value: JsonValue) -> list[list[int]]:
    """A saved list of integer lists (``[[3, 1], …]``); [] for anything else."""
    if not isinstance(value, list):
        return []
    return [[int(x) for x in item if isinstance(x, int | float)] for item in value if isinstance(item, list)]


class AsyncTraining(TrainingLoop):
    """One asynchronous :meth:`relight.Trainer.fit` over a store and gateway the trainer set up."""

    def __init__(
        self,
        store: Store,
        gateway: GatewayControl,
        algorithm: Algorithm,
        options: TrainerOptions,
        hooks: LoopHooks,
        *,
        progress: RunProgress,
        run_id: str | None = None,
        rewards: GroupRewards | None = None,
    ) -> None:
        super().__init__(store, gateway, algorithm, options, hooks, run_id=run_id, rewards=rewards)
        if options.max_staleness is None:
            raise ConfigError("the asynchronous loop needs max_staleness, the versions a sample may lag (0 or more)")
        self.max_staleness: int = options.max_staleness
        self.progress = progress
        self.live = bool(getattr(algorithm, "live_updates", False))
        self._inflight: dict[str, _Group] = {}
        self._ready: list[_Group] = []
        self._scoring: dict[str, asyncio.Task[None]] = {}
        """Finished groups being scored by the group rewards, by group id."""
        self._pending: deque[_Task] = deque()
        self._totals = _Totals(began=time.perf_counter())
        self._done: set[tuple[int, int]] = set()
        """(step, position) of the tasks trained, dropped for good or aged out."""
        self._resampled: dict[tuple[int, int], int] = {}
        self._first_step = 0

    async def run(
        self, dataset: Sequence[JsonValue], resources: Resources, *, resume: Resume | None = None
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        """Train over ``epochs`` passes of ``dataset``; returns the last step, resources and each step's metrics."""
        size = self.options.batch_size
        steps_per_epoch = -(-len(dataset) // size)
        if resume is not None:
            self._take_up(resume)
        tasks = (
            _Task(epoch, epoch * steps_per_epoch + index // size + 1, index % size, task)
            for epoch in range(self.options.epochs)
            for index, task in enumerate(dataset)
        )
        self._pending = pending = deque(
            dataclasses.replace(task, resampled=self._resampled.get(task.key, 0))
            for task in tasks
            if task.key not in self._done
        )
        with self.progress.count("async training", len(pending), unit="groups") as count:
            return await self._run(resources, lambda: self._show(count))

    def _take_up(self, resume: Resume) -> None:
        """Restore what :meth:`position` saved: tasks done, resample counts, the run's counts, the step."""
        position = resume.position
        self._first_step = resume.step
        self._done = {(int(step), int(index)) for step, index in _pairs(position.get("done"))}
        resampled = _pairs(position.get("resampled"))
        self._resampled = {(int(step), int(index)): int(count) for step, index, count in resampled}
        totals = position.get("totals")
        if isinstance(totals, dict):
            for name, value in totals.items():
                if name in _COUNTED and isinstance(value, int | float):
                    setattr(self._totals, name, int(value))

    def position(self) -> dict[str, JsonValue]:
        """Tasks trained, dropped or aged out (as ``[step, position]``), tasks sampled again, and the counts."""
        totals = self._totals
        return {
            "done": [[step, index] for step, index in sorted(self._done)],
            "resampled": [[step, index, count] for (step, index), count in sorted(self._resampled.items())],
            "totals": {name: getattr(totals, name) for name in _COUNTED},
        }

    def _show(self, count: ProgressCount) -> None:
        """The progress line: groups done (trained, dropped or aged out), policy version, rate and drops."""
        totals = self._totals
        done = totals.groups_trained + totals.groups_dropped_stale + totals.groups_aged_out - totals.groups_resampled
        rate = totals.rollouts / max(time.perf_counter() - totals.began, 1e-9)
        info = (
            f"v{self.algorithm.policy_version}  {rate:.1f} rollouts/s  {len(self._inflight)} groups in flight  "
            f"dropped {totals.groups_dropped_stale} stale, {totals.groups_aged_out} aged out"
        )
        count.show(done, info)

    async def _run(
        self,
        resources: Resources,
        show: Callable[[], None],
    ) -> tuple[int, Resources, list[dict[str, float]]]:
        pending = self._pending
        history: list[dict[str, float]] = []
        admitted = updated = 0
        step = self._first_step
        discarded_before = self._totals.discarded  # those of a run resumed from a checkpoint held no slot here
        update: asyncio.Task[tuple[dict[str, float], Resources]] | None = None
        idle_since = time.perf_counter()
        runners_idle_since: float | None = time.perf_counter()
        try:
            while pending or self._inflight or self._scoring or self._ready or update is not None:
                admitted = await self._admit_while_room(admitted, updated, discarded_before, resources)
                if self._inflight and runners_idle_since is not None:
                    self._totals.runner_idle += time.perf_counter() - runners_idle_since
                    runners_idle_since = None
                if update is None:
                    batch = await self._batch(last=not pending and not self._inflight and not self._scoring)
                    if batch:
                        step += 1
                        waited = time.perf_counter() - idle_since
                        self._totals.learner_idle += waited
                        update = asyncio.create_task(self._update(batch, step, waited))
                if update is None and not self._inflight and not self._scoring:
                    continue
                if update is not None:
                    busy = self._inflight or self._scoring
                    await asyncio.wait({update}, timeout=self._next_look() if busy else None)
                    if update.done():
                        metrics, resources = update.result()
                        update, idle_since, updated = None, time.perf_counter(), updated + 1
                        history.append(metrics)
                        self.hooks.report(metrics)
                else:
                    await asyncio.sleep(self._next_look())
                await self._look()
                await self._age_out()
                show()
                if not self._inflight and runners_idle_since is None:
                    runners_idle_since = time.perf_counter()
        finally:
            if update is not None:
                update.cancel()
            for scoring in self._scoring.values():
                scoring.cancel()
        if history:  # groups dropped or aged out after the last update count too
            history[-1] |= self._counts()
        return step, resources, history

    async def _admit_while_room(self, admitted: int, updated: int, discarded_before: int, resources: Resources) -> int:
        """Admit pending tasks while the staleness bound leaves room; returns how many are admitted in all.

        After ``updated`` updates, at most ``batch_size * (updated + k + 1)`` tasks may have been admitted,
        less those discarded (dropped or aged out) since this loop began, which hold no slot.
        """
        size, k = self.options.batch_size, self.max_staleness
        while self._pending and admitted - (self._totals.discarded - discarded_before) < size * (updated + k + 1):
            await self._admit(admitted, self._pending.popleft(), resources)
            admitted += 1
        return admitted

    async def _admit(self, index: int, task: _Task, resources: Resources) -> None:
        group = task.group_id
        requests = group_requests(
            task.input,
            group,
            step=task.step,
            n_samples=self.options.n_samples,
            max_attempts=self.options.max_attempts,
            resources=resources,
            run_id=self.run_id,
        )
        rollouts = await self.store.enqueue(requests)
        ids = [rollout.rollout_id for rollout in rollouts]
        version = self.algorithm.policy_version
        self._inflight[group] = _Group(index, task, group, ids, version, time.perf_counter())

    async def _look(self) -> None:
        """Queue every in-flight group whose rollouts have all ended, after one store query for all of them."""
        self._scored()
        groups = list(self._inflight.values())
        if not groups:
            return
        rollouts = await self.store.wait([rid for group in groups for rid in group.rollout_ids], timeout=0)
        start = 0
        for group in groups:
            mine, start = rollouts[start : start + len(group.rollout_ids)], start + len(group.rollout_ids)
            if all(rollout.is_finished for rollout in mine):
                await self._finished(group, mine)

    async def _finished(self, group: _Group, rollouts: list[Rollout]) -> None:
        """A group whose rollouts have all ended: score it (in a task of its own), read its transitions, queue it."""
        del self._inflight[group.group_id]
        group.rollouts = rollouts
        await self.gateway.flush()
        if self.rewards.active:
            self._scoring[group.group_id] = asyncio.create_task(self._score(group))
        else:
            await self._queue(group)

    async def _score(self, group: _Group) -> None:
        await self.rewards.apply(self.store, group.rollouts)
        await self._queue(group)

    def _scored(self) -> None:
        """Forget the groups scored since the last look; a scoring task that failed fails the run, as inline."""
        for scored, scoring in list(self._scoring.items()):
            if scoring.done():
                del self._scoring[scored]
                scoring.result()

    async def _queue(self, group: _Group) -> None:
        group.transitions = await self.builder.from_store(self.store, group.rollouts)
        self._totals.rollouts += len(group.rollouts)
        self._ready.append(group)

    async def _batch(self, *, last: bool) -> list[_Group]:
        """The next batch of whole groups, dropping those too stale to train on; [] while one is not ready."""
        version, k = self.algorithm.policy_version, self.max_staleness
        fresh: list[_Group] = []
        for group in self._ready:
            if group.staleness(version) > k:
                await self._drop(group, DropReason.STALENESS, version)
                if self.options.resample_stale:
                    self._pending.appendleft(dataclasses.replace(group.task, resampled=group.task.resampled + 1))
                    self._resampled[group.task.key] = group.task.resampled + 1
                    self._totals.groups_resampled += 1
                else:
                    self._done.add(group.task.key)
            else:
                fresh.append(group)
        self._ready = fresh
        size = self.options.batch_size
        if len(fresh) < size and not (last and fresh):
            return []
        batch, self._ready = fresh[:size], fresh[size:]
        self._totals.groups_trained += len(batch)
        self._done.update(group.task.key for group in batch)
        return sorted(batch, key=lambda group: group.index)

    async def _drop(self, group: _Group, reason: DropReason, version: int) -> None:
        if reason is DropReason.STALENESS:
            self._totals.groups_dropped_stale += 1
            self._totals.transitions_dropped_stale += len(group.transitions)
        else:
            self._totals.groups_aged_out += 1
        await mark_dropped(self.store, group.rollout_ids, reason, policy_version=version)

    async def _age_out(self) -> None:
        """Cancel groups that can no longer be trained on in time: too many versions or seconds behind."""
        version, k, limit = self.algorithm.policy_version, self.max_staleness, self.options.group_timeout
        now = time.perf_counter()
        for group in list(self._inflight.values()):
            if version - group.version > k or (limit is not None and now - group.admitted_at >= limit):
                rollouts = await self.store.wait(group.rollout_ids, timeout=0)
                if all(rollout.is_finished for rollout in rollouts):  # it finished as the policy moved on
                    await self._finished(group, rollouts)
                    continue
                del self._inflight[group.group_id]
                self._done.add(group.task.key)
                await self.store.cancel(group.rollout_ids)
                await self._drop(group, DropReason.AGED_OUT, version)

    def _next_look(self) -> float:
        """Seconds until the next look: :data:`POLL_SECONDS`, or less when a group ages out by time sooner."""
        limit = self.options.group_timeout
        if limit is None or not self._inflight:
            return POLL_SECONDS
        first = min(group.admitted_at for group in self._inflight.values())
        return min(POLL_SECONDS, max(0.0, first + limit - time.perf_counter()))

    async def _update(self, batch: list[_Group], step: int, waited: float) -> tuple[dict[str, float], Resources]:
        version = self.algorithm.policy_version
        transitions = [transition for group in batch for transition in group.transitions]
        began = time.perf_counter()
        if self.live:
            learned = await self.algorithm.update(transitions)
        else:
            async with self.gateway.paused():
                learned = await self.algorithm.update(transitions)
        updated = time.perf_counter()
        await record_update(self.store, self.algorithm, transitions, version_before=version)
        rollouts = [rollout for group in batch for rollout in group.rollouts]
        returns = await self.hooks.returns(rollouts)
        metrics: dict[str, float] = {
            **step_metrics(
                step,
                learned,
                self.algorithm.policy_version,
                rollouts,
                transitions,
                returns,
                time_rollouts_s=waited,
                time_update_s=updated - began,
                policies=PolicyCounts.of(self.builder, self.algorithm),
            ),
            "epoch": max(group.task.epoch for group in batch),
            **self._async_metrics(batch, version, step),
            **self.rewards.take_metrics(),
        }
        resources = await self.hooks.publish(metrics)
        return await self.hooks.finish_step(metrics, resources), resources

    def _counts(self) -> dict[str, float]:
        """Groups and transitions left out so far (the last step's row holds the run's totals)."""
        totals = self._totals
        return {
            "groups_dropped_stale": totals.groups_dropped_stale,
            "transitions_dropped_stale": totals.transitions_dropped_stale,
            "groups_aged_out": totals.groups_aged_out,
            "groups_resampled": totals.groups_resampled,
        }

    def _async_metrics(self, batch: list[_Group], version: int, step: int) -> dict[str, float]:
        totals = self._totals
        elapsed = max(time.perf_counter() - totals.began, 1e-9)
        staleness = Counter(
            version - (t.policy_version if t.policy_version is not None else group.version)
            for group in batch
            for t in group.transitions
        )
        histogram = {f"staleness_{d}": float(staleness.get(d, 0)) for d in range(self.max_staleness + 1)}
        values = list(staleness.elements())
        return {
            "max_staleness": self.max_staleness,
            "samples_per_update": sum(len(group.rollouts) for group in batch),
            "staleness_mean": statistics.fmean(values) if values else 0.0,
            "staleness_max": max(values, default=0),
            **histogram,
            **self._counts(),
            "rollouts_per_s": totals.rollouts / elapsed,
            "updates_per_s": (step - self._first_step) / elapsed,
            "learner_idle_fraction": totals.learner_idle / elapsed,
            "runner_idle_fraction": totals.runner_idle / elapsed,
        }
