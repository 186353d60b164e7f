"""Group rewards: a reward step that scores a GRPO group's finished rollouts together, before they are trained on.

A code reward sees one rollout; some rewards need the whole group at once (a judge model ranking
the group's rollouts against each other, RULER's design). A :class:`GroupReward` is that step: given
a group's finished rollouts, it returns a reward for each (or none, with the reason), notes to keep
on each rollout, and what it cost. The training loops call :meth:`GroupRewards.apply` on every
group once all its rollouts have ended and before they become transitions; it writes each reward as
a reward span (``reward <name>``) and each note as an annotation span (``annotation <name>``) on the
rollout's attempt, so the episode's return is the sum of the agent's own rewards and the group
rewards, and ``relight show`` and the dashboard show what the step decided.

Rules:

* Only succeeded rollouts are scored (the others are not trained either); a rollout that already
  carries this step's reward (a group scored before a restart) is not scored again.
* A group the step cannot score gets no reward from it, never a made-up one: its rollouts keep
  only their own rewards (with no code reward, none at all: equal returns, no learning signal),
  each gets a note saying why, and the group is counted (``<name>_groups_no_signal``).
* A step that raises is counted the same way and logged; it never stops training.
* The costs of a step (its calls, tokens, seconds) are summed per training step into the metrics
  under the step's name: ``judge_calls``, ``judge_input_tokens``, ``judge_output_tokens``,
  ``judge_latency_s``. A judge calls its model directly, never through the gateway, so its calls are
  never recorded as LLM spans, never trained on and never counted as the policy's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import JsonValue

from relight import semconv
from relight._internal.ids import random_hex
from relight.errors import ConfigError
from relight.plugins import registry
from relight.records import AttemptStatus, Rollout, RolloutStatus, Span, SpanKind
from relight.store import Store

__all__ = ["GroupReward", "GroupRewards", "GroupScores", "Sample", "Usage", "group_reward"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    """One succeeded rollout of a group, with the spans of the attempt that counts."""

    rollout: Rollout
    attempt_id: str
    spans: Sequence[Span]


@dataclass(slots=True)
class Usage:
    """What scoring a group cost: model calls, their tokens and wall time, and the calls that had to be made again."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.latency_s += other.latency_s
        self.retries += other.retries


@dataclass(frozen=True, slots=True)
class GroupScores:
    """A group reward's decision: a reward per rollout it scored, a note per rollout, what it cost.

    A rollout absent from ``rewards`` gets no reward from the step. ``failure`` names why the group got
    no signal at all (``malformed``, ``timeout``, ``http_error``, …); the loop counts it.
    """

    rewards: Mapping[str, float] = field(default_factory=dict[str, float])
    notes: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict[str, Mapping[str, JsonValue]])
    usage: Usage = field(default_factory=Usage)
    failure: str | None = None


@runtime_checkable
class GroupReward(Protocol):
    """Scores a group's finished rollouts together (a judge model, a pairwise comparison, …)."""

    @property
    def name(self) -> str:
        """Names its reward and annotation spans and prefixes its metrics (``judge``)."""
        ...

    async def score(self, group_id: str, task: JsonValue, samples: Sequence[Sample]) -> GroupScores:
        """Score the succeeded rollouts of one group; must return in bounded time and never for a made-up reason."""
        ...


class GroupRewards:
    """Runs group rewards on each finished group and keeps their costs until the step's metrics take them."""

    def __init__(self, steps: Sequence[GroupReward] = ()) -> None:
        names = [step.name for step in steps]
        if len(set(names)) != len(names):
            raise ConfigError(f"group rewards need distinct names, got {names}")
        self.steps = tuple(steps)
        self._usage: dict[str, Usage] = {}
        self._counts: Counter[str] = Counter()

    @property
    def active(self) -> bool:
        return bool(self.steps)

    async def apply(self, store: Store, rollouts: Sequence[Rollout]) -> None:
        """Score every group among ``rollouts`` with every step, all groups at once, and record the results."""
        if not self.steps:
            return
        groups: dict[str, list[Rollout]] = {}
        for rollout in rollouts:
            groups.setdefault(rollout.group_id, []).append(rollout)
        await asyncio.gather(*(self._group(store, group_id, members) for group_id, members in groups.items()))

    def take_metrics(self) -> dict[str, float]:
        """The costs and counts since the last call, under each step's name, then reset."""
        metrics: dict[str, float] = {}
        for step in self.steps:
            usage, name = self._usage.pop(step.name, Usage()), step.name
            metrics |= {
                f"{name}_groups": self._counts.pop(f"{name}_groups", 0),
                f"{name}_groups_no_signal": self._counts.pop(f"{name}_groups_no_signal", 0),
                f"{name}_calls": usage.calls,
                f"{name}_retries": usage.retries,
                f"{name}_input_tokens": usage.input_tokens,
                f"{name}_output_tokens": usage.output_tokens,
                f"{name}_latency_s": usage.latency_s,
            }
        return metrics

    async def _group(self, store: Store, group_id: str, rollouts: Sequence[Rollout]) -> None:
        samples = await _samples(store, rollouts)
        if not samples:
            return
        await asyncio.gather(*(self._step(store, step, group_id, samples) for step in self.steps))

    async def _step(self, store: Store, step: GroupReward, group_id: str, samples: Sequence[Sample]) -> None:
        todo = [s for s in samples if not _carries(s, step.name)]
        if not todo:
            return
        try:
            scores = await step.score(group_id, todo[0].rollout.input, todo)
        except Exception as error:  # a broken step costs its group's signal, never the run
            logger.exception("relight: group reward %r failed on group %s", step.name, group_id)
            detail = f"{type(error).__name__}: {error}"
            scores = GroupScores(notes={s.rollout.rollout_id: {"error": detail} for s in todo}, failure="error")
        self._usage.setdefault(step.name, Usage()).add(scores.usage)
        self._counts[f"{step.name}_groups"] += 1
        if scores.failure is not None or not scores.rewards:
            self._counts[f"{step.name}_groups_no_signal"] += 1
        await store.add_spans(_spans(step.name, todo, scores))


async def _samples(store: Store, rollouts: Sequence[Rollout]) -> list[Sample]:
    samples: list[Sample] = []
    for rollout in rollouts:
        if rollout.status is not RolloutStatus.SUCCEEDED:
            continue
        attempts = await store.list_attempts(rollout.rollout_id)
        used = next((a.attempt_id for a in reversed(attempts) if a.status is AttemptStatus.SUCCEEDED), None)
        if used is not None:
            samples.append(Sample(rollout, used, await store.query_spans(rollout.rollout_id, used)))
    return samples


def _carries(sample: Sample, name: str) -> bool:
    return any(s.kind is SpanKind.REWARD and s.attributes.get(semconv.REWARD_NAME) == name for s in sample.spans)


def _spans(name: str, samples: Sequence[Sample], scores: GroupScores) -> list[Span]:
    """A reward span for each rollout scored and an annotation span for each with a note, ends after its calls."""
    spans: list[Span] = []
    for sample in samples:
        rollout_id = sample.rollout.rollout_id
        at = max([time.time_ns(), *(s.end_time for s in sample.spans)])
        note = dict(scores.notes.get(rollout_id, {}))
        if scores.failure is not None:
            note.setdefault("no_signal", scores.failure)
        reward = scores.rewards.get(rollout_id)
        if reward is not None:
            spans.append(
                _span(
                    sample,
                    f"reward {name}",
                    at,
                    {
                        semconv.SPAN_KIND: SpanKind.REWARD.value,
                        semconv.REWARD: float(reward),
                        semconv.REWARD_NAME: name,
                    },
                )
            )
        if note:
            spans.append(
                _span(
                    sample,
                    f"annotation {name}",
                    at,
                    {semconv.SPAN_KIND: SpanKind.ANNOTATION.value, semconv.ANNOTATION: json.dumps(note, default=str)},
                )
            )
    return spans


def _span(sample: Sample, span_name: str, at: int, attributes: dict[str, JsonValue]) -> Span:
    return Span(
        rollout_id=sample.rollout.rollout_id,
        attempt_id=sample.attempt_id,
        span_id=random_hex(16),
        trace_id=random_hex(32),
        name=span_name,
        start_time=at,
        end_time=at,
        attributes=attributes,
    )


def group_reward(name: str, **options: object) -> GroupReward:
    """The group reward registered as ``name`` (``"judge"``), made with ``options``."""
    made: GroupReward = registry("group_rewards").get(name)(**options)
    return made
