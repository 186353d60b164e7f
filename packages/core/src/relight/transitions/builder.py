"""From a finished attempt's spans to transitions: what every trainer (and the JSONL export) consumes.

Each LLM span the gateway recorded becomes one :class:`relight.Transition`, with the role that made
it (:mod:`relight.transitions.role_join`). Credit is assigned over all the attempt's calls (see
:mod:`relight.transitions.credit`) before a role filter keeps the roles being trained, so a filtered
role's calls still count as steps of the episode. With several
policies (:mod:`relight.policies`) each transition names the policy that trains it instead.

Only succeeded rollouts yield transitions unless ``include_failed`` is set; then a failed
rollout's last attempt counts, its calls sharing ``failed_reward`` when it recorded no reward.
"""

from __future__ import annotations

import copy
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from pydantic import JsonValue

from relight import semconv
from relight.errors import ConfigError
from relight.plugins import registry
from relight.policies import Policies, Policy, RoleFilter, as_policies, check_role_filter, role_matches
from relight.records import Attempt, AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind, Transition
from relight.store import Store
from relight.transitions.credit import Call, CreditAssigner, Episode, Event
from relight.transitions.drops import DropReason, dropped_reason
from relight.transitions.role_join import JoinedCall, join_roles
from relight.transitions.trained_calls import trained_calls
from relight.transitions.verdicts import CallVerdict, Note, Reason, RolloutVerdict

__all__ = [
    "PolicyMap",
    "RoleFilter",
    "TransitionBuilder",
    "credit_assigner",
    "episode_return",
    "last_attempt_spans",
    "reward_role",
    "role_matches",
]

logger = logging.getLogger(__name__)

PolicyMap = Mapping[str, Policy | str | Sequence[str] | re.Pattern[str]]
"""Policies as given: each name to a :class:`relight.Policy` or a role filter (see :mod:`relight.policies`)."""


def credit_assigner(name: str, **options: float | str) -> CreditAssigner:
    """The credit assigner registered as ``name`` (see :mod:`relight.transitions.credit`), made with ``options``."""
    assigner: CreditAssigner = registry("credit_assigners").make(name, **options)
    return assigner


class TransitionBuilder:
    """Makes transitions from finished rollouts: join, credit, role filter or policies, groups.

    Args:
        roles: see :data:`RoleFilter`.
        policies: several policies, one per role (see :mod:`relight.policies`): each transition names the
            policy that trains it, and a call of a role no policy names, or of a frozen policy, is left
            out. Instead of ``roles``, never with it.
        credit: the name of a registered credit assigner (``identical``, ``discounted``, ``per_step``, ``air``).
        group_by_role: group transitions by task and role (``<group>/<role>``) rather than by task. The calls of
            a role with a reward of its own (``relight.emit_reward(..., role=...)``) are grouped so in any case:
            their credit is that reward, another signal than the other calls' episode reward, so a group-relative
            algorithm must not weigh one against the other (they would otherwise share a group when one policy
            trains both roles).
        include_failed: also make transitions of failed rollouts (from their last attempt).
        failed_reward: the return of a failed attempt that recorded no reward.
        include_inexact: also train calls whose token ids are not exactly the call (``relight.retokenized.exact``
            false: a retokenized call whose text, tool calls or tools its ids miss); they are left out and
            counted by default, noted when kept.
        credit_options: passed to the credit assigner's factory (``gamma=0.9``).
    """

    def __init__(
        self,
        *,
        roles: RoleFilter = None,
        policies: PolicyMap | None = None,
        credit: str = "identical",
        group_by_role: bool = False,
        include_failed: bool = False,
        failed_reward: float = 0.0,
        include_inexact: bool = False,
        **credit_options: float | str,
    ) -> None:
        if policies is not None and roles is not None:
            raise ConfigError(
                f"roles={roles!r} and policies are given together: with policies, each policy names its roles "
                "and a role no policy names is left out"
            )
        self.roles: RoleFilter = check_role_filter(roles)
        self.policies: dict[str, Policy] | None = as_policies(policies) if policies is not None else None
        """The run's policies by name; None for a run of one policy (the role filter's)."""
        self._policies = Policies(self.policies) if self.policies is not None else None
        self.assign: CreditAssigner = credit_assigner(credit, **credit_options)
        self.group_by_role = group_by_role
        self.include_failed = include_failed
        self.failed_reward = failed_reward
        self.include_inexact = include_inexact
        self.skipped = 0
        """Calls left out because they had no token ids (see the gateway's ``untrainable`` count)."""
        self.inexact = 0
        """Calls left out because their token ids are not exactly the call (``include_inexact`` keeps them)."""
        self.left_out: Counter[str] = Counter()
        """With policies: calls of each policy's roles that :meth:`from_spans` left out so far (a frozen policy,
        served by another policy, no token ids)."""

    def with_policies(self, policies: PolicyMap) -> TransitionBuilder:
        """A copy of this builder that trains ``policies`` (what ``Trainer(policies=...)`` does with its builder).

        Raises:
            relight.ConfigError: this builder has a role filter, or policies of its own.
        """
        if self.roles is not None:
            raise ConfigError(
                f"policies and a role filter (TransitionBuilder(roles={self.roles!r})) are given together: "
                "with policies, each policy names its roles"
            )
        if self.policies is not None:
            raise ConfigError("policies are given twice (to the Trainer and to its TransitionBuilder): give them once")
        copied = copy.copy(self)
        copied.left_out = Counter()
        copied.policies = as_policies(policies)
        copied._policies = Policies(copied.policies)
        return copied

    async def from_store(self, store: Store, rollouts: Iterable[Rollout]) -> list[Transition]:
        """Transitions of finished rollouts, read from ``store``, rollout by rollout."""
        transitions: list[Transition] = []
        for rollout in rollouts:
            attempt_id = _attempt_to_use(rollout, await store.list_attempts(rollout.rollout_id), self.include_failed)
            if attempt_id is not None:
                spans = await store.query_spans(rollout.rollout_id, attempt_id)
                transitions += self.from_spans(rollout, attempt_id, spans)
        return transitions

    def from_spans(self, rollout: Rollout, attempt_id: str, spans: Sequence[Span]) -> list[Transition]:
        """Transitions of one attempt, from its spans."""
        verdicts = self.judge(rollout, attempt_id, spans)
        self.skipped += sum(verdict.reason is Reason.NO_TOKEN_IDS for verdict in verdicts)
        self.inexact += sum(verdict.reason is Reason.INEXACT for verdict in verdicts)
        self.left_out.update(v.policy for v in verdicts if v.policy is not None and v.reason is not None)
        return [verdict.transition for verdict in verdicts if verdict.transition is not None]

    async def explain(self, store: Store, rollout: Rollout, *, training: bool = True) -> RolloutVerdict:
        """Every LLM call of ``rollout``, each with the transition it became or why it became none.

        ``training`` judges what :meth:`relight.Trainer.fit` trained: a call is trained only when the
        store records that an update which changed the weights learned from it
        (:mod:`relight.transitions.trained_calls`); a validation rollout, a group it dropped
        (:mod:`relight.transitions.drops`), a skipped update or a group without signal is not. Without
        it, which calls can become transitions, as ``relight export`` writes them.
        """
        attempts = await store.list_attempts(rollout.rollout_id)
        return self.explain_spans(rollout, attempts, await store.query_spans(rollout.rollout_id), training=training)

    def explain_spans(
        self,
        rollout: Rollout,
        attempts: Sequence[Attempt],
        spans: Sequence[Span],
        *,
        training: bool = True,
        build: bool = True,
    ) -> RolloutVerdict:
        """:meth:`explain` on a rollout's attempts and spans already read (``build``: see :meth:`judge`)."""
        used = _attempt_to_use(rollout, attempts, self.include_failed)
        judged = used or (attempts[-1].attempt_id if attempts else None)
        own = [span for span in spans if span.attempt_id == judged]
        dropped = dropped_reason(own) if training else None
        whole = _DROPS.get(dropped) if dropped is not None else None
        reason = whole if whole is not None else _rollout_reason(rollout, used, training)
        calls: list[CallVerdict] = []
        for attempt in attempts:
            verdicts = self.judge(rollout, attempt.attempt_id, spans, build=build)
            overrule = reason if attempt.attempt_id == judged else Reason.RETRIED_ATTEMPT
            if overrule is not None:
                detail = _reason_detail(overrule, rollout, attempt)
                verdicts = [replace(v, transition=None, reason=overrule, detail=detail) for v in verdicts]
            elif training:
                verdicts = _as_updates_left_them(verdicts, own, dropped)
            calls += verdicts
        return RolloutVerdict(rollout, judged, reason, calls)

    def judge(
        self, rollout: Rollout, attempt_id: str, spans: Sequence[Span], *, build: bool = True
    ) -> list[CallVerdict]:
        """Each LLM call of one attempt, in the order made, with its transition or the reason it has none.

        ``build=False`` decides the same verdicts without building the transitions (a dashboard's
        index of many rollouts needs only whether each call is trained).
        """
        by_kind: dict[SpanKind, list[Span]] = {}
        for span in spans:
            if span.attempt_id == attempt_id:
                by_kind.setdefault(span.kind, []).append(span)
        calls = by_kind.get(SpanKind.LLM, [])
        llm = sorted((s for s in calls if s.status_code != "ERROR"), key=lambda s: s.start_time)
        joined = join_roles(llm, sorted(by_kind.get(SpanKind.ROLE, []), key=lambda s: s.start_time))
        rewards = [
            Event(span.start_time, value, str(span.attributes.get(semconv.REWARD_NAME, "")), reward_role(span))
            for span in by_kind.get(SpanKind.REWARD, [])
            if (value := _number(span.attributes.get(semconv.REWARD))) is not None
        ]
        if rollout.status is RolloutStatus.FAILED and all(event.role is not None for event in rewards):
            ends = (s.end_time for kind in by_kind.values() for s in kind)
            rewards.append(Event(max(ends, default=0), self.failed_reward, "failed"))
        tools = [
            Event(span.start_time, 1.0 if span.attributes.get(semconv.TOOL_SUCCESS) is True else 0.0, span.name)
            for span in by_kind.get(SpanKind.TOOL, [])
        ]
        episode = [Call(item.role, item.span.start_time, item.span.end_time) for item in joined]
        credit = self.assign(
            Episode(episode, sorted(rewards, key=lambda e: e.time), sorted(tools, key=lambda e: e.time))
        )
        rewarded_roles = {event.role for event in rewards if event.role is not None}
        verdicts = [
            self._verdict(rollout, attempt_id, step, item, reward, build, rewarded_roles)
            for step, (item, reward) in enumerate(zip(joined, credit, strict=True))
        ]
        verdicts += [
            CallVerdict.left_out(span, Reason.FAILED_CALL, span.status_message or "the call failed")
            for span in calls
            if span.status_code == "ERROR"
        ]
        return sorted(verdicts, key=lambda verdict: verdict.span.start_time)

    def _verdict(
        self,
        rollout: Rollout,
        attempt_id: str,
        step: int,
        item: JoinedCall,
        reward: float,
        build: bool,
        rewarded_roles: frozenset[str] | set[str] = frozenset(),
    ) -> CallVerdict:
        attributes = item.span.attributes
        policy: str | None = None
        if self._policies is None:
            if not role_matches(self.roles, item.role):
                detail = f"role {item.role!r} is not among the trained roles ({self.roles!r})"
                return CallVerdict.left_out(
                    item.span, Reason.FILTERED_ROLE, detail, step=step, role=item.role, reward=reward
                )
        else:
            policy = self._policies.policy_of(item.role)
            left_out = _policy_left_out(policy, item.role, attributes, self._policies)
            if left_out is not None:
                reason, detail = left_out
                return CallVerdict.left_out(
                    item.span, reason, detail, step=step, role=item.role, reward=reward, policy=policy
                )
        inexact = attributes.get(semconv.RETOKENIZED_EXACT) is False
        if inexact and not self.include_inexact:
            detail = str(attributes.get(semconv.RETOKENIZED_MISMATCH) or "its token ids are not exactly the call")
            return CallVerdict.left_out(
                item.span, Reason.INEXACT, detail, step=step, role=item.role, reward=reward, policy=policy
            )
        prompt_ids, response_ids = attributes.get(semconv.PROMPT_TOKEN_IDS), attributes.get(semconv.RESPONSE_TOKEN_IDS)
        if not (isinstance(prompt_ids, list) and prompt_ids and isinstance(response_ids, list)):
            detail = (
                "an imported trace holds text, not token ids: retokenize it (relight export --tokenizer MODEL)"
                if semconv.IMPORT_MISSING in attributes
                else "the upstream returned no token ids and the gateway had no retokenizer"
            )
            return CallVerdict.left_out(
                item.span, Reason.NO_TOKEN_IDS, detail, step=step, role=item.role, reward=reward, policy=policy
            )
        notes = [Note.RETOKENIZED] if attributes.get(semconv.RETOKENIZED) is True else []
        if inexact:
            notes.append(Note.INEXACT)
        finish = attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS)
        if isinstance(finish, list) and "length" in finish:
            notes.append(Note.TRUNCATED)
        own_group = self.group_by_role or item.role in rewarded_roles
        transition = self._transition(rollout, attempt_id, step, item, reward, policy, own_group) if build else None
        return CallVerdict(
            span=item.span,
            step=step,
            role=item.role,
            reward=reward,
            transition=transition,
            reason=None,
            notes=tuple(notes),
            policy=policy,
        )

    def _transition(
        self,
        rollout: Rollout,
        attempt_id: str,
        step: int,
        item: JoinedCall,
        reward: float,
        policy: str | None,
        own_group: bool,
    ) -> Transition:
        """The call's transition; :meth:`_verdict` has checked it has token ids. ``own_group``: grouped with its
        role's calls only (``<group>/<role>``)."""
        attributes = item.span.attributes
        prompt_ids = cast(list[int], attributes[semconv.PROMPT_TOKEN_IDS])
        response_ids = cast(list[int], attributes[semconv.RESPONSE_TOKEN_IDS])
        logprobs = attributes.get(semconv.RESPONSE_LOGPROBS)
        version = attributes.get(semconv.POLICY_VERSION)
        group = f"{rollout.group_id}/{item.role}" if own_group and item.role else rollout.group_id
        return Transition(
            rollout_id=rollout.rollout_id,
            attempt_id=attempt_id,
            group_id=group,
            step=step,
            role=item.role,
            policy=policy,
            prompt_token_ids=prompt_ids,
            response_token_ids=response_ids,
            response_logprobs=[float(v) for v in cast(list[float], logprobs)] if isinstance(logprobs, list) else None,
            reward=reward,
            policy_version=version if isinstance(version, int) else None,
            mode=rollout.mode,
            span_id=item.span.span_id,
            retokenized=attributes.get(semconv.RETOKENIZED) is True,
            metadata=_metadata(attributes),
        )


def _policy_left_out(
    policy: str | None, role: str | None, attributes: Mapping[str, JsonValue], policies: Policies
) -> tuple[Reason, str] | None:
    """Why a call of a run with policies is not trained by ``policy`` (its role's), or None when it is.

    A call must have been served by the policy that trains it: its tokens and logprobs are that
    policy's. The gateway records which policy served each call (``relight.policy``), or that it
    could not tell the call's role when it arrived (``relight.policy.unrouted``: the base model served it).
    """
    if policy is None:
        named = ", ".join(f"{name!r} ({p.describe()})" for name, p in policies.by_name.items())
        return Reason.NO_POLICY, f"no policy names role {role!r} (policies: {named}); the base model served it"
    if policies.by_name[policy].frozen:
        return Reason.FROZEN_POLICY, f"policy {policy!r} is frozen: it serves role {role!r} and is never trained"
    if attributes.get(semconv.POLICY_UNROUTED) is True:
        return Reason.OTHER_POLICY, (
            f"the gateway could not tell the call's role when it arrived, so the base model served it, not policy "
            f"{policy!r} (role {role!r}); an adapter or relight.role() names the role of each call as it is made"
        )
    served = attributes.get(semconv.POLICY)
    if isinstance(served, str) and served != policy:
        return Reason.OTHER_POLICY, f"policy {served!r} served it, but its role {role!r} belongs to policy {policy!r}"
    return None


def _metadata(attributes: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """The call's response id; for a call an update landed in, which version sampled which tokens; for a
    retokenized trace, whether its tokens reproduce the traced text."""
    metadata: dict[str, JsonValue] = {"response_id": attributes.get(semconv.GEN_AI_RESPONSE_ID)}
    if semconv.POLICY_VERSION_SEGMENTS in attributes:
        metadata["policy_version_segments"] = attributes[semconv.POLICY_VERSION_SEGMENTS]
    if semconv.RETOKENIZED_EXACT in attributes:
        metadata["retokenized_exact"] = attributes[semconv.RETOKENIZED_EXACT]
    if semconv.RETOKENIZED_MISMATCH in attributes:
        metadata["retokenized_mismatch"] = attributes[semconv.RETOKENIZED_MISMATCH]
    if semconv.RETOKENIZED_REASONS in attributes:
        metadata["retokenized_reasons"] = attributes[semconv.RETOKENIZED_REASONS]
    return metadata


def _attempt_to_use(rollout: Rollout, attempts: Sequence[Attempt], include_failed: bool) -> str | None:
    """The attempt whose calls are trained: a succeeded rollout's succeeded one, a failed rollout's last."""
    if rollout.status is RolloutStatus.SUCCEEDED:
        return next((a.attempt_id for a in reversed(attempts) if a.status is AttemptStatus.SUCCEEDED), None)
    if rollout.status is RolloutStatus.FAILED and include_failed and attempts:
        return attempts[-1].attempt_id
    return None


def _rollout_reason(rollout: Rollout, used: str | None, training: bool) -> Reason | None:
    if rollout.status is RolloutStatus.CANCELLED:
        return Reason.CANCELLED
    if rollout.status is RolloutStatus.FAILED and used is None:
        return Reason.FAILED_ROLLOUT
    if not rollout.is_finished:
        return Reason.NOT_FINISHED
    if training and rollout.mode is Mode.VAL:
        return Reason.VALIDATION
    return None


_DROPS = {DropReason.STALENESS: Reason.STALE, DropReason.AGED_OUT: Reason.AGED_OUT}
"""Drops that hold for every call of the rollout; the others hold for the calls an update was given."""


def _as_updates_left_them(
    verdicts: list[CallVerdict], spans: Sequence[Span], dropped: DropReason | None
) -> list[CallVerdict]:
    """Calls that could be trained, judged by the trainer's record: trained only if an update that changed the
    weights learned from them (:mod:`relight.transitions.trained_calls`)."""
    trained = trained_calls(spans)
    if dropped is DropReason.UPDATE_SKIPPED:
        reason = Reason.UPDATE_SKIPPED
    elif dropped is DropReason.NO_SIGNAL or trained:
        reason = Reason.NO_SIGNAL
    else:
        reason = Reason.NOT_UPDATED
    detail = _REASON_DETAILS[reason]
    return [
        verdict
        if not verdict.trained or verdict.span.span_id in trained
        else replace(verdict, transition=None, reason=reason, detail=detail)
        for verdict in verdicts
    ]


_REASON_DETAILS = {
    Reason.STALE: "the trainer dropped its group: a call was more policy versions behind than max_staleness allows",
    Reason.AGED_OUT: "the trainer cancelled its group: unfinished when it could no longer be trained in time",
    Reason.CANCELLED: "the rollout was cancelled",
    Reason.FAILED_ROLLOUT: "the rollout failed all {rollout.attempt_count} attempt(s) and failed rollouts are not "
    "trained (include_failed=False)",
    Reason.NOT_FINISHED: "the rollout is {rollout.status.value}",
    Reason.VALIDATION: "validation rollouts measure the policy and are never trained",
    Reason.RETRIED_ATTEMPT: "attempt {attempt.number} ended {attempt.status.value}; a later attempt counts",
    Reason.UPDATE_SKIPPED: "the update it entered left the weights unchanged (every group's rewards were equal)",
    Reason.NO_SIGNAL: "its group's rewards were all equal, so the algorithm skipped it (no advantage to learn from)",
    Reason.NOT_UPDATED: "no update that changed the weights has used it (the run stopped first, or no trainer ran)",
}


_DEV_MODE_DETAIL = "dev mode: never trained (it runs each task once, to check the wiring)"


def _reason_detail(reason: Reason, rollout: Rollout, attempt: Attempt) -> str:
    """A reason that holds for a whole rollout, in words; a dev-mode rollout says that it is one."""
    if reason is Reason.VALIDATION and rollout.from_dev_mode:
        return _DEV_MODE_DETAIL
    return _REASON_DETAILS[reason].format(rollout=rollout, attempt=attempt)


async def last_attempt_spans(store: Store, rollout_id: str) -> list[Span]:
    """The spans of a rollout's latest attempt, the one its status and reward come from ([] before any)."""
    attempts = await store.list_attempts(rollout_id)
    return await store.query_spans(rollout_id, attempts[-1].attempt_id) if attempts else []


def episode_return(spans: Iterable[Span]) -> float | None:
    """The sum of an attempt's rewards (returned or emitted); None when it recorded none.

    A reward for one role (:func:`reward_role`) is that role's credit, not the agent's outcome: it is
    left out.
    """
    rewards = [
        value
        for span in spans
        if span.kind is SpanKind.REWARD
        and reward_role(span) is None
        and (value := _number(span.attributes.get(semconv.REWARD))) is not None
    ]
    return sum(rewards) if rewards else None


def reward_role(span: Span) -> str | None:
    """The role a reward span is for (``emit_reward(..., role=...)``); None for the episode's own rewards."""
    role = span.attributes.get(semconv.REWARD_ROLE)
    return role if isinstance(role, str) and role else None


def _number(value: JsonValue | None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
