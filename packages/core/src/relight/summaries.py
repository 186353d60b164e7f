"""Per-rollout summaries that stores keep as they go, so a list of 100,000 rollouts is one indexed query.

A dashboard lists rollouts by status, mode, group, reward, role, step, policy version and attempts.
Reward and roles live in spans, twenty or so per attempt: reading them for every rollout of a large
store takes minutes. So each store keeps one :class:`RolloutSummary` per rollout, updated in the
same transaction as the write that changes it: the rollout's own fields when it is saved, and
:class:`SpanFacts` of its latest attempt's spans as they are added (a new attempt starts from
nothing, spans of an earlier attempt leave it alone). :meth:`relight.store.Store.list_summaries`
filters and pages them; :class:`SummaryFilter.matches` is the filter's meaning in Python, which the
in-memory store uses and the conformance tests hold the SQL stores to.

Every change gives the summary a new ``changed`` number, higher than any before, so a reader that
remembers the highest it saw can ask for what changed since (``changed_after``) instead of rereading.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from relight import semconv
from relight.records import Mode, Rollout, RolloutStatus, Span, SpanKind

__all__ = ["RolloutSummary", "SpanFacts", "SummaryFilter", "SummaryPage", "latest_attempt_id", "step_of"]


def latest_attempt_id(rollout: Rollout) -> str | None:
    """The id of the rollout's latest attempt (every store names attempts ``<rollout>-a<number>``)."""
    return f"{rollout.rollout_id}-a{rollout.attempt_count}" if rollout.attempt_count else None


def step_of(metadata: dict[str, JsonValue]) -> int | None:
    """The training step a trainer wrote into a rollout's metadata, if it did."""
    step = metadata.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


@dataclass(slots=True)
class SpanFacts:
    """What a rollout list needs from one attempt's spans, added up span by span in any order."""

    spans: int = 0
    reward: float | None = None
    """The sum of the attempt's numeric rewards but those for one role (as :func:`relight.transitions.episode_return`);
    None without any."""
    roles: Counter[str] = field(default_factory=Counter[str])
    """Role spans by role."""
    calls: int = 0
    """LLM spans."""
    failed_calls: int = 0
    """LLM spans the gateway recorded as errors."""
    untrainable_calls: int = 0
    """LLM spans that did not fail but carry no prompt or response token ids."""
    dropped: str | None = None
    """The reason a trainer dropped the attempt's group (a :class:`relight.transitions.drops.DropReason` value)."""

    @classmethod
    def of(cls, spans: Iterable[Span]) -> SpanFacts:
        facts = cls()
        for span in spans:
            facts.add(span)
        return facts

    def add(self, span: Span) -> None:
        self.spans += 1
        attributes = span.attributes
        kind = span.kind
        if kind is SpanKind.REWARD:
            if isinstance(aimed := attributes.get(semconv.REWARD_ROLE), str) and aimed:
                return  # one role's own reward, not the rollout's outcome
            value = attributes.get(semconv.REWARD)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.reward = (self.reward or 0.0) + float(value)
        elif kind is SpanKind.ROLE:
            role = attributes.get(semconv.ROLE)
            if role is not None:
                self.roles[str(role)] += 1
        elif kind is SpanKind.LLM:
            self.calls += 1
            if span.status_code == "ERROR":
                self.failed_calls += 1
            elif not (
                isinstance(prompt := attributes.get(semconv.PROMPT_TOKEN_IDS), list)
                and prompt
                and isinstance(attributes.get(semconv.RESPONSE_TOKEN_IDS), list)
            ):
                self.untrainable_calls += 1
        elif kind is SpanKind.ANNOTATION and span.name == semconv.DROPPED_SPAN:
            reason = attributes.get(semconv.DROPPED_REASON)
            if isinstance(reason, str) and self.dropped is None:
                self.dropped = reason

    def merged(self, other: SpanFacts) -> SpanFacts:
        """These facts and ``other``'s together (spans added in two batches)."""
        rewards = [r for r in (self.reward, other.reward) if r is not None]
        return SpanFacts(
            spans=self.spans + other.spans,
            reward=sum(rewards) if rewards else None,
            roles=self.roles + other.roles,
            calls=self.calls + other.calls,
            failed_calls=self.failed_calls + other.failed_calls,
            untrainable_calls=self.untrainable_calls + other.untrainable_calls,
            dropped=self.dropped if self.dropped is not None else other.dropped,
        )


class RolloutSummary(BaseModel):
    """One rollout and the facts of its latest attempt's spans: a row of a rollout list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rollout: Rollout
    spans: int = 0
    reward: float | None = None
    roles: dict[str, int] = Field(default_factory=dict[str, int])
    calls: int = 0
    failed_calls: int = 0
    untrainable_calls: int = 0
    dropped: str | None = None
    changed: int = 0
    """The store's change number when the summary last changed."""

    @classmethod
    def of(cls, rollout: Rollout, facts: SpanFacts, changed: int) -> RolloutSummary:
        return cls(
            rollout=rollout,
            spans=facts.spans,
            reward=facts.reward,
            roles=dict(sorted(facts.roles.items())),
            calls=facts.calls,
            failed_calls=facts.failed_calls,
            untrainable_calls=facts.untrainable_calls,
            dropped=facts.dropped,
            changed=changed,
        )

    @property
    def step(self) -> int | None:
        return step_of(self.rollout.metadata)


class SummaryFilter(BaseModel):
    """Which summaries to list; every field left None matches all, and set fields must all hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    statuses: list[RolloutStatus] | None = None
    """Any of these statuses."""
    mode: Mode | None = None
    group_id: str | None = None
    roles: list[str] | None = None
    """At least one role span of any of these roles."""
    step: int | None = None
    """``metadata["step"]``, as the trainer writes it."""
    policy_version: int | None = None
    """The rollout's ``resources_version``."""
    min_reward: float | None = None
    max_reward: float | None = None
    """Reward bounds (inclusive); a rollout without a reward matches neither."""
    min_attempts: int | None = Field(default=None, ge=0)
    min_calls: int | None = Field(default=None, ge=0)
    min_failed_calls: int | None = Field(default=None, ge=0)
    min_untrainable_calls: int | None = Field(default=None, ge=0)
    dropped: str | None = None
    """Only rollouts whose latest attempt a trainer dropped for this reason."""
    changed_after: int | None = Field(default=None, ge=0)
    """Only summaries changed after this change number; the list then runs in change order, oldest first."""
    before: str | None = None
    """A keyset cursor: only rollouts enqueued before this one (older), the list's next page after it."""
    after: str | None = None
    """A keyset cursor: only rollouts enqueued after this one (newer); the page is the ``limit`` of them
    nearest to it (the list's page before it), still newest first."""

    @model_validator(mode="after")
    def _one_order(self) -> SummaryFilter:
        if self.changed_after is not None and (self.before is not None or self.after is not None):
            raise ValueError(
                "before/after page the list in enqueue order and changed_after lists in change order: "
                "give one or the other"
            )
        return self

    def matches(self, summary: RolloutSummary) -> bool:
        """Whether ``summary`` passes the filter: the meaning every store's query must have.

        The cursors (``before``, ``after``) are places in the list, not facts of a summary: stores apply them.
        """
        rollout = summary.rollout
        reward = summary.reward
        return (
            (self.statuses is None or rollout.status in self.statuses)
            and (self.mode is None or rollout.mode is self.mode)
            and (self.group_id is None or rollout.group_id == self.group_id)
            and (self.roles is None or any(role in summary.roles for role in self.roles))
            and (self.step is None or summary.step == self.step)
            and (self.policy_version is None or rollout.resources_version == self.policy_version)
            and (self.min_reward is None or (reward is not None and reward >= self.min_reward))
            and (self.max_reward is None or (reward is not None and reward <= self.max_reward))
            and (self.min_attempts is None or rollout.attempt_count >= self.min_attempts)
            and (self.min_calls is None or summary.calls >= self.min_calls)
            and (self.min_failed_calls is None or summary.failed_calls >= self.min_failed_calls)
            and (self.min_untrainable_calls is None or summary.untrainable_calls >= self.min_untrainable_calls)
            and (self.dropped is None or summary.dropped == self.dropped)
            and (self.changed_after is None or summary.changed > self.changed_after)
        )


class SummaryPage(BaseModel):
    """One page of a summary list: newest rollout first, or oldest change first with ``changed_after``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    """How many summaries match the filter (its cursors aside), on every page."""
    offset: int = 0
    """How many of those come before this page: the offset asked for, or where a cursor's page begins."""
    rows: list[RolloutSummary]
    changed: int
    """The store's latest change number when it answered."""
