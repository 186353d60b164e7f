"""Re-scoring stored rollouts with a changed reward, without sampling again: the reward debugger.

:func:`rescore` gives every succeeded rollout of a store (or of one run) a new reward: a
:data:`~relight.rewards.recorded.RewardFunction` of the task and the :class:`~relight.rewards.recorded.RecordedRollout`
(its messages, tool calls and results as recorded), or any :class:`~relight.rewards.group.GroupReward`
(a judge model, which scores a group at once). Then it says what the change does to training, group by
group (a GRPO group is the rollouts of one task in one step):

* **signal**: a group has learning signal when its rewards are not all equal
  (:func:`relight.transitions.learning_signal.has_signal`, the definition the trainer skips flat groups by); the
  report counts the groups that gain signal, lose it, keep it or stay flat;
* **flips**: the rollouts whose advantage changes sign (a rollout the update pushed up that it would now
  push down, or one it ignored that it would now move), with GRPO's advantage of each rollout's return in
  its group (the mean taken away, divided by the unbiased deviation, as relight-torch and verl compute it
  per episode);
* **distribution**: the rewards before and after.

The original rewards are never touched. Unless it is a dry run, each new reward is written as a span of
kind ``rescored`` (named ``rescored <name>``, ``relight.reward.name`` = name) on the attempt it scored:
returns, transitions, summaries and training read reward spans only, so nothing a run trains on changes.
Nothing is written until every rollout has been scored, and a name already used is refused, so a rescore
that fails leaves the store as it was. A reward function that raises on a rollout (or returns no number)
costs that rollout's new reward, reported with the error; the rest go on.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import statistics
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from relight import semconv
from relight._internal.ids import random_hex
from relight.errors import ConfigError
from relight.records import AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind
from relight.rewards.group import GroupReward, Sample
from relight.rewards.recorded import RewardFunction, recorded_rollout
from relight.store import Store
from relight.transitions.builder import episode_return
from relight.transitions.learning_signal import TOLERANCE, has_signal

__all__ = [
    "GroupChange",
    "RescoreReport",
    "RescoredRollout",
    "Scorer",
    "bins",
    "distribution",
    "grpo_advantages",
    "load_scorer",
    "rescore",
    "scorer_name",
    "summary",
]

_EPSILON = 1e-6
"""Added to a group's deviation, as relight-torch's and verl's GRPO do."""


@dataclass(frozen=True, slots=True)
class RescoredRollout:
    """One rollout's reward before and after, and its advantage in its group under each."""

    rollout_id: str
    group_id: str
    before: float | None
    """Its return as recorded (None: it recorded no reward, which trains as 0)."""
    new: float | None
    """The changed reward's value (None: it gave none; ``error`` says why)."""
    after: float | None
    """Its return under the change: ``new``, or the recorded return plus ``new`` when the change adds."""
    advantage_before: float = 0.0
    advantage_after: float | None = None
    error: str | None = None

    @property
    def flipped(self) -> bool:
        """Whether its advantage changes sign (up, down or none) under the change."""
        if self.advantage_after is None:
            return False
        return _sign(self.advantage_before) != _sign(self.advantage_after)


@dataclass(frozen=True, slots=True)
class GroupChange:
    """One group's learning signal before and after (``after`` None: a rollout of it could not be scored)."""

    group_id: str
    rollouts: tuple[RescoredRollout, ...]
    before: bool
    after: bool | None

    @property
    def change(self) -> str:
        """``gained``, ``lost``, ``kept``, ``flat`` or ``unknown``."""
        if self.after is None:
            return "unknown"
        if self.before == self.after:
            return "kept" if self.before else "flat"
        return "gained" if self.after else "lost"


@dataclass(frozen=True, slots=True)
class RescoreReport:
    """What a rescore did: each rollout's rewards and advantages, each group's signal, what was stored."""

    name: str
    adds: bool
    """Whether the new reward was added to the recorded return rather than put in its place."""
    rollouts: tuple[RescoredRollout, ...]
    groups: tuple[GroupChange, ...]
    stored: int
    """Spans written (0 in a dry run)."""
    skipped: Mapping[str, int] = field(default_factory=dict[str, int])
    """Rollouts not scored, by reason (``failed``, ``not finished``, …): only succeeded rollouts are trained."""

    def counts(self) -> Counter[str]:
        """Groups by :attr:`GroupChange.change`."""
        return Counter(group.change for group in self.groups)

    @property
    def flips(self) -> list[RescoredRollout]:
        return [rollout for rollout in self.rollouts if rollout.flipped]

    @property
    def errors(self) -> list[RescoredRollout]:
        return [rollout for rollout in self.rollouts if rollout.error is not None]


Scorer = RewardFunction | GroupReward


async def rescore(
    store: Store,
    reward: Scorer,
    *,
    name: str,
    rollout_prefix: str | None = None,
    mode: Mode | None = None,
    adds: bool = False,
    dry_run: bool = False,
    concurrency: int = 8,
) -> RescoreReport:
    """Score the store's succeeded rollouts with ``reward`` and report what moves (see the module docstring).

    Args:
        name: names the new reward (its spans' ``relight.reward.name``); refused when rollouts carry it already.
        rollout_prefix: only rollouts whose id starts with it (a run's training rollouts: ``<run_id>-``).
        mode: only training or only validation rollouts.
        adds: the new reward adds to the recorded return (as a group reward adds in training) instead of
            taking its place.
        dry_run: report only; store nothing.
        concurrency: rollouts (or groups) scored at once.

    Raises:
        relight.ConfigError: ``name`` is empty or already used, or no rollout is there to score.
    """
    if not name:
        raise ConfigError("the rescored reward needs a name (--name)")
    rollouts = [
        rollout
        for rollout in await store.list_rollouts(mode=mode)
        if rollout_prefix is None or rollout.rollout_id.startswith(rollout_prefix)
    ]
    skipped = Counter(_skip_reason(r) for r in rollouts if r.status is not RolloutStatus.SUCCEEDED)
    samples = [sample for r in rollouts if (sample := await _sample(store, r)) is not None]
    if not samples:
        where = f" with ids starting {rollout_prefix!r}" if rollout_prefix else ""
        raise ConfigError(f"no succeeded rollout{where} to rescore in the store ({len(rollouts)} rollout(s) in all)")
    if not dry_run and (named := sum(_carries(sample, name) for sample in samples)):
        raise ConfigError(
            f"{named} rollout(s) already carry a rescored reward named {name!r}: give another --name, or --dry-run"
        )
    limit = asyncio.Semaphore(max(concurrency, 1))
    if isinstance(reward, GroupReward):
        scored = await _by_groups(reward, samples, limit)
    else:
        scored = dict(await asyncio.gather(*(_one(reward, sample, limit) for sample in samples)))
    report = _report(name, adds, samples, scored, skipped)
    if not dry_run:
        spans = [_span(sample, name, value) for sample in samples if (value := scored[_id(sample)][0]) is not None]
        await store.add_spans(spans)
        report = RescoreReport(name, adds, report.rollouts, report.groups, len(spans), report.skipped)
    return report


def load_scorer(path: str) -> Scorer:
    """The reward at ``"package.module:name"``: a reward function of ``(task, rollout)``, or a group reward (a
    :class:`~relight.rewards.Judge` made in that module).

    Raises:
        relight.ConfigError: the path is malformed, its module does not import (the error named), or the
            object is neither a group reward nor a function of two arguments.
    """
    module, colon, qualname = path.partition(":")
    if not colon or not module or not qualname:
        raise ConfigError(f"reward {path!r} must be an import path like my_package.rewards:exact_answer")
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception as error:  # a module that fails to import raises anything at all: all of it is bad input
        raise ConfigError(f"cannot import reward {path!r}: {type(error).__name__}: {error}") from error
    if isinstance(found, GroupReward):
        return found
    if not callable(found):
        raise ConfigError(f"reward {path!r} is a {type(found).__name__}: give a function or a group reward")
    try:
        inspect.signature(found).bind(None, None)
    except TypeError:
        raise ConfigError(
            f"reward {path!r} must take (task, rollout): the task and the recorded rollout "
            "(relight.rewards.recorded.RecordedRollout)"
        ) from None
    except ValueError:  # a builtin without a signature: let the call tell
        pass
    return cast(RewardFunction, found)


def scorer_name(scorer: Scorer) -> str:
    """What a rescore is named by default: the group reward's name, or the function's."""
    if isinstance(scorer, GroupReward):
        return scorer.name
    return str(getattr(scorer, "__name__", type(scorer).__name__))


def grpo_advantages(returns: Sequence[float]) -> list[float]:
    """GRPO's advantage of each return in one group: less the group's mean, over its unbiased deviation (a group
    of one against a mean of 0 and a deviation of 1, as verl does)."""
    if len(returns) < 2:
        return [value for value in returns]
    mean, deviation = statistics.fmean(returns), statistics.stdev(returns)
    return [(value - mean) / (deviation + _EPSILON) for value in returns]


Scored = tuple[float | None, str | None]
"""A rollout's new reward, or None and why not."""


async def _sample(store: Store, rollout: Rollout) -> Sample | None:
    """The succeeded rollout with the spans of the attempt that succeeded (the one training reads)."""
    if rollout.status is not RolloutStatus.SUCCEEDED:
        return None
    attempts = await store.list_attempts(rollout.rollout_id)
    used = next((a.attempt_id for a in reversed(attempts) if a.status is AttemptStatus.SUCCEEDED), None)
    if used is None:
        return None
    return Sample(rollout, used, await store.query_spans(rollout.rollout_id, used))


def _skip_reason(rollout: Rollout) -> str:
    return rollout.status.value if rollout.is_finished else "not finished"


def _id(sample: Sample) -> str:
    return sample.rollout.rollout_id


def _carries(sample: Sample, name: str) -> bool:
    return any(s.kind is SpanKind.RESCORED and s.attributes.get(semconv.REWARD_NAME) == name for s in sample.spans)


async def _one(reward: RewardFunction, sample: Sample, limit: asyncio.Semaphore) -> tuple[str, Scored]:
    """Call the reward function on one recorded rollout; what it raises or returns amiss is the rollout's error."""
    recorded = recorded_rollout(sample.rollout, sample.spans)
    async with limit:
        try:
            if inspect.iscoroutinefunction(reward):
                value: object = await cast(Callable[..., Awaitable[object]], reward)(sample.rollout.input, recorded)
            else:
                value = await asyncio.to_thread(reward, sample.rollout.input, recorded)
                if inspect.isawaitable(value):
                    value = await cast(Awaitable[object], value)
        except Exception as error:  # the reward's own bug costs this rollout's score, never the others'
            return _id(sample), (None, _describe(error))
    return _id(sample), _checked(value)


async def _by_groups(reward: GroupReward, samples: Sequence[Sample], limit: asyncio.Semaphore) -> dict[str, Scored]:
    """Score each group at once with a group reward; a rollout it gives no reward gets the reason."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.rollout.group_id, []).append(sample)

    async def group(group_id: str, members: list[Sample]) -> dict[str, Scored]:
        async with limit:
            try:
                scores = await reward.score(group_id, members[0].rollout.input, members)
            except Exception as error:
                return {_id(sample): (None, _describe(error)) for sample in members}
        found: dict[str, Scored] = {}
        for sample in members:
            given = scores.rewards.get(_id(sample))
            if given is not None:
                found[_id(sample)] = _checked(given)
            else:
                note = scores.notes.get(_id(sample), {})
                why = scores.failure or str(note.get("error") or note.get("no_signal") or "")
                found[_id(sample)] = (None, f"{reward.name} gave it no reward" + (f": {why}" if why else ""))
        return found

    results = await asyncio.gather(*(group(group_id, members) for group_id, members in groups.items()))
    return {rollout_id: scored for result in results for rollout_id, scored in result.items()}


def _checked(value: object) -> Scored:
    if value is None:
        return None, "the reward returned None (no reward)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"the reward returned {type(value).__name__} {value!r}, not a number"
    if not math.isfinite(value):
        return None, f"the reward returned {value!r}, not a finite number"
    return float(value), None


def _describe(error: BaseException) -> str:
    """The error and where in the reward it was raised (its last frame), on one line."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def _report(
    name: str, adds: bool, samples: Sequence[Sample], scored: Mapping[str, Scored], skipped: Mapping[str, int]
) -> RescoreReport:
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.rollout.group_id, []).append(sample)
    rollouts: list[RescoredRollout] = []
    changes: list[GroupChange] = []
    for group_id, members in groups.items():
        before = [episode_return(sample.spans) for sample in members]
        trained_before = [value or 0.0 for value in before]  # a rollout that recorded no reward trains as 0
        news = [scored[_id(sample)] for sample in members]
        after = [_after(old, new, adds) for old, (new, _) in zip(before, news, strict=True)]
        known = all(value is not None for value in after)
        advantages_before = grpo_advantages(trained_before)
        advantages_after = grpo_advantages([value or 0.0 for value in after]) if known else [None] * len(members)
        members_rescored = tuple(
            RescoredRollout(_id(sample), group_id, old, new, value, adv_before, adv_after, error)
            for sample, old, (new, error), value, adv_before, adv_after in zip(
                members, before, news, after, advantages_before, advantages_after, strict=True
            )
        )
        rollouts += members_rescored
        changes.append(
            GroupChange(
                group_id,
                members_rescored,
                has_signal(trained_before),
                has_signal(value or 0.0 for value in after) if known else None,
            )
        )
    return RescoreReport(name, adds, tuple(rollouts), tuple(changes), 0, dict(skipped))


def _after(before: float | None, new: float | None, adds: bool) -> float | None:
    if new is None:
        return None
    return (before or 0.0) + new if adds else new


def _sign(value: float) -> int:
    return 0 if abs(value) <= TOLERANCE else 1 if value > 0 else -1


def _span(sample: Sample, name: str, value: float) -> Span:
    """The rescored reward of one rollout, on the attempt it scored, after everything else the attempt recorded."""
    at = max([time.time_ns(), *(s.end_time for s in sample.spans)])
    return Span(
        rollout_id=sample.rollout.rollout_id,
        attempt_id=sample.attempt_id,
        span_id=random_hex(16),
        trace_id=random_hex(32),
        name=f"rescored {name}",
        start_time=at,
        end_time=at,
        attributes={
            semconv.SPAN_KIND: SpanKind.RESCORED.value,
            semconv.REWARD: value,
            semconv.REWARD_NAME: name,
        },
    )


def distribution(values: Iterable[float | None], edges: Sequence[float]) -> list[int]:
    """How many of ``values`` fall in each bin between consecutive ``edges`` (the last bin closed); None skipped."""
    counts = [0] * max(len(edges) - 1, 0)
    for value in values:
        if value is None or not counts:
            continue
        index = next((i for i in range(len(counts)) if value < edges[i + 1]), len(counts) - 1)
        counts[max(index, 0)] += 1
    return counts


def bins(values: Iterable[float | None], count: int = 10) -> list[float]:
    """Edges of ``count`` equal bins from the least to the greatest of ``values`` (one bin around a single value)."""
    known = [value for value in values if value is not None]
    if not known:
        return []
    low, high = min(known), max(known)
    if high - low <= TOLERANCE:
        return [low - 0.5, high + 0.5]
    step = (high - low) / count
    return [low + i * step for i in range(count)] + [high]


def summary(values: Iterable[float | None]) -> dict[str, float]:
    """Count, mean, deviation, least and greatest of the known ``values``."""
    known = [value for value in values if value is not None]
    if not known:
        return {"count": 0}
    return {
        "count": len(known),
        "mean": statistics.fmean(known),
        "std": statistics.pstdev(known),
        "min": min(known),
        "max": max(known),
    }
