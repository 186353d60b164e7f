"""Searching instead of training: an algorithm that improves what the agent reads, driven by ``Trainer.fit``.

Prompt optimisation changes no weights: it tries versions of the agent's prompts, runs the agent
with each on tasks of its choosing and keeps what does best. Such an algorithm is a
:class:`SearchAlgorithm` (relight-apo's ``APO``), and ``Trainer(algorithm=APO(...)).fit(agent, train, val)``
runs it on the same machinery as training: the store, the gateway in front of the agent's model (the
algorithm's ``upstreams``: any OpenAI-compatible endpoint), runners (in this process, runner processes,
``relight runner`` hosts or Ray), the run folder, experiment trackers and the dashboard. What the
trainer lends it is a :class:`SearchRun`:

* :meth:`SearchRun.run` enqueues rollouts and waits for them (with the progress bar), then lets the
  trainer's group rewards (a judge) score them; :meth:`SearchRun.returns` reads each one's return.
  A rollout pinned to a resources version (``RolloutRequest(resources_version=...)``) runs with it,
  in whichever process runs it.
* :meth:`SearchRun.publish` publishes a resources version, with the model's name and the run's
  transition settings added as for training; publishing what the latest version already holds
  publishes nothing, so a step done again after a crash gets the version it published before.
* :meth:`SearchRun.record` writes a metrics row (``train`` for a step of the search, ``val`` for a
  validation), which goes to the metrics file, the reward curve, trackers and the progress lines.
* :meth:`SearchRun.checkpoint` keeps the algorithm's state, JSON, in ``search_state.json`` (written
  under another name, then renamed: whole or not at all).

**Resume.** A search killed before it finished (SIGKILL, OOM, Ctrl-C) is resumed by running the same
command with the same ``run_dir``, as a training run is (:mod:`relight.training.resume` checks that it is
the same run): the metrics file is cut back to the step of the last checkpoint, a ``resume`` row is
added, and the algorithm finds the state it saved in :attr:`SearchRun.restored`. Rollout ids made
with :meth:`SearchRun.rollout_id` are the same in the resumed run, so enqueueing a batch again hands
back the rollouts already in the store: what was measured before the kill is used, not measured again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast, runtime_checkable

from pydantic import JsonValue

from relight.algorithm import UpstreamTarget
from relight.errors import NotFoundError
from relight.gateway import Upstream
from relight.records import Resources, Rollout, RolloutRequest, RolloutStatus
from relight.rewards.group import GroupRewards
from relight.store import Store
from relight.training.progress import RunProgress
from relight.training.run_folder import RunFolder
from relight.transitions.builder import episode_return, last_attempt_spans

__all__ = ["SEARCH_STATE", "Restored", "SearchAlgorithm", "SearchRun", "publish_changed", "restore_search"]

SEARCH_STATE = "search_state.json"
"""The file of a run folder that holds a search algorithm's last checkpointed state."""

RunBatch = Callable[[Sequence[RolloutRequest], str], Awaitable[list[Rollout]]]


@runtime_checkable
class SearchAlgorithm(Protocol):
    """Improves the resources an agent reads (its prompts) by running the rollouts it chooses; no weights change."""

    @property
    def model(self) -> str:
        """The model name agents put in their requests; ``llm.model`` carries it to the agent."""
        ...

    def upstreams(self) -> Sequence[UpstreamTarget | Upstream]:
        """Where the agent's model is served (any OpenAI-compatible endpoint: an ``OpenAIUpstream`` with its key);
        the gateway forwards every call there. Called on a worker thread."""
        ...

    async def search(
        self, run: SearchRun, train: Sequence[JsonValue], val: Sequence[JsonValue]
    ) -> Mapping[str, JsonValue]:
        """Search, publishing each version it tries through ``run``; returns what the run's summary should add.

        ``run.restored`` holds what a killed run had checkpointed, to go on from.
        """
        ...


@dataclass(frozen=True, slots=True)
class Restored:
    """What a killed search had checkpointed last: the step it had finished and the algorithm's state then."""

    step: int
    state: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])


class SearchRun:
    """What ``Trainer.fit`` lends a search algorithm: rollouts, publishing, metrics and checkpoints (see the module)."""

    def __init__(
        self,
        *,
        store: Store,
        run_batch: RunBatch,
        flush: Callable[[], Awaitable[None]],
        folder: RunFolder,
        run_id: str,
        progress: RunProgress,
        base_items: Mapping[str, JsonValue],
        rewards: GroupRewards | None = None,
        restored: Restored | None = None,
        max_attempts: int = 3,
    ) -> None:
        self.store = store
        self.max_attempts = max_attempts
        """Tries per rollout before it fails (``Trainer(max_attempts=...)``), for the requests the algorithm makes."""
        self.folder = folder
        self.run_id = run_id
        """Prefixes the run's rollout ids (:meth:`rollout_id`), so a resumed run finds its rollouts again."""
        self.restored = restored
        self.progress = progress
        self._run_batch = run_batch
        self._flush = flush
        self._base = dict(base_items)
        self._rewards = rewards or GroupRewards()

    def rollout_id(self, name: str) -> str:
        """The id of the run's rollout called ``name`` (``round3-child-t5``): the same when the run is resumed."""
        return f"{self.run_id}-{name}"

    async def run(self, requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
        """Enqueue ``requests``, wait until every rollout has finished, then score them with the group rewards."""
        rollouts = await self._run_batch(requests, label)
        await self._flush()  # every call's span is in the store before anything reads them
        await self._rewards.apply(self.store, rollouts)
        return rollouts

    async def returns(self, rollouts: Sequence[Rollout]) -> list[float | None]:
        """Each rollout's return (its last attempt's rewards summed, 0 without any); None for one that failed."""
        found: list[float | None] = []
        for rollout in rollouts:
            if rollout.status is RolloutStatus.SUCCEEDED:
                found.append(episode_return(await last_attempt_spans(self.store, rollout.rollout_id)) or 0.0)
            else:
                found.append(None)
        return found

    async def publish(self, items: Mapping[str, JsonValue]) -> Resources:
        """Publish ``items`` (with the model's name and the run's transition settings) as the next resources
        version; returns the latest version instead when it already holds exactly these items."""
        return await publish_changed(self.store, {**self._base, **items})

    def record(self, kind: Literal["train", "val"], metrics: Mapping[str, float]) -> None:
        """A row of the metrics file (``step`` among ``metrics``), sent to the trackers and shown as a progress line."""
        self.folder.record(kind, metrics)
        self.progress.step(metrics)

    def reward_metrics(self) -> dict[str, float]:
        """What the group rewards (a judge) cost since the last call: ``judge_calls``, tokens, … (empty without any)."""
        return self._rewards.take_metrics() if self._rewards.active else {}

    def checkpoint(self, step: int, state: Mapping[str, JsonValue]) -> None:
        """Keep ``state`` as the point a killed run goes on from; ``step`` is the last step it finished."""
        path = self.folder.path / SEARCH_STATE
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", encoding="utf-8") as file:
            json.dump({"step": step, "saved": time.time(), "state": dict(state)}, file)
            file.flush()
            os.fsync(file.fileno())
        partial.replace(path)

    def note(self, text: str) -> None:
        self.progress.note(text)

    def warn(self, text: str) -> None:
        self.progress.warn(text)


async def publish_changed(store: Store, items: Mapping[str, JsonValue]) -> Resources:
    """Publish ``items`` as the next resources version, unless the latest version holds exactly them (then it)."""
    try:
        latest = await store.get_resources()
    except NotFoundError:
        latest = None
    if latest is not None and latest.items == items:
        return latest
    return await store.publish_resources(items)


def restore_search(folder: RunFolder) -> Restored | None:
    """The state a killed search checkpointed in ``folder``, with the metrics file cut back to its step; None
    when it had checkpointed nothing (it starts over, its rollouts found again by their ids)."""
    began = time.perf_counter()
    path = folder.path / SEARCH_STATE
    saved: Mapping[str, JsonValue] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    step = saved.get("step")
    step = step if isinstance(step, int) else 0
    seen = max((int(row.get("step", 0)) for row in folder.read_rows() if row["kind"] == "train"), default=0)
    note = {"steps_lost": max(seen - step, 0), "seconds_to_resume": round(time.perf_counter() - began, 3)}
    folder.resume(step, {}, note)
    state = saved.get("state")
    return Restored(step, cast(dict[str, JsonValue], state)) if isinstance(state, dict) else None
