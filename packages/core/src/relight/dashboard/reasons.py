"""Why a listed rollout's calls were not trained, from its summary alone, and the list's filter by reason.

A list of 100,000 rollouts cannot judge each one's spans (:meth:`relight.TransitionBuilder.explain`
reads them all), so the list reads reasons off the store's summaries (:mod:`relight.summaries`):
the rollout's status, mode and drop mark decide reasons that hold for every call, exactly as
``explain`` does; within a trained rollout, failed calls are ``failed call``, calls of roles the
builder's role filter refuses (counted by their role spans) are ``filtered role`` (with policies:
``no policy`` or ``frozen policy``, as the role's policy decides) and the rest
without token ids are ``no token ids``, and the rest carry the reason the trainer marked the
attempt with when an update did not learn from it (``update skipped``, ``group without signal``).
That split assumes each call has one role span (as every adapter records; a call named only by a
``relight.role()`` block has none and counts as a call without a role) and that untrainable calls
belong to trained roles; where it does not hold the counts may differ. Two things
only the spans tell: a call that no update has used yet (``not in an update``: the run stopped
first) and a group without signal inside an attempt whose other groups were learned from
(grouping by role) count here as trained, and so does a call its role's policy did not serve
(``served by another policy``) or whose retokenized ids are not exactly the call (``inexact tokens``,
decided by rendering it). A rollout's own page judges its spans, exactly.
"""

from __future__ import annotations

from collections import Counter

from relight.errors import ConfigError
from relight.policies import Policies
from relight.records import Mode, RolloutStatus
from relight.summaries import RolloutSummary, SummaryFilter
from relight.transitions.builder import TransitionBuilder, role_matches
from relight.transitions.drops import DropReason
from relight.transitions.verdicts import Reason

__all__ = ["NOTHING", "both", "reason_filter", "reasons_of", "refused_roles", "role_reason"]

NOTHING = SummaryFilter(statuses=[])
"""A filter no summary passes."""

_DROPS = {DropReason.STALENESS.value: Reason.STALE, DropReason.AGED_OUT.value: Reason.AGED_OUT}
_UNLEARNED = {DropReason.UPDATE_SKIPPED.value: Reason.UPDATE_SKIPPED, DropReason.NO_SIGNAL.value: Reason.NO_SIGNAL}
"""Marks an update leaves on the calls it was given and did not learn from."""


def _rollout_reason(summary: RolloutSummary, builder: TransitionBuilder) -> Reason | None:
    """A reason that holds for all the rollout's calls, in :meth:`TransitionBuilder.explain_spans`'s order."""
    rollout = summary.rollout
    if summary.dropped in _DROPS:
        return _DROPS[summary.dropped]
    if rollout.status is RolloutStatus.CANCELLED:
        return Reason.CANCELLED
    if rollout.status is RolloutStatus.FAILED and not builder.include_failed:
        return Reason.FAILED_ROLLOUT
    if not rollout.is_finished:
        return Reason.NOT_FINISHED
    if rollout.mode is Mode.VAL:
        return Reason.VALIDATION
    return None


def reasons_of(summary: RolloutSummary, builder: TransitionBuilder) -> Counter[Reason]:
    """How many of the latest attempt's calls were left out, by reason (see the module's note)."""
    reasons: Counter[Reason] = Counter()
    if summary.calls == 0:
        return reasons
    whole = _rollout_reason(summary, builder)
    if whole is not None:
        reasons[whole] = summary.calls
        return reasons
    kept = summary.calls - summary.failed_calls
    by_role: Counter[Reason] = Counter()
    for role, count in summary.roles.items():
        if (reason := role_reason(role, builder)) is not None:
            by_role[reason] += count
    without_role = max(0, kept - sum(summary.roles.values()))  # no role span: the calls have no role
    if without_role and (reason := role_reason(None, builder)) is not None:
        by_role[reason] += without_role
    filtered = 0
    for reason, count in by_role.items():
        by_role[reason] = min(count, kept - filtered)
        filtered += by_role[reason]
    untrainable = min(summary.untrainable_calls, kept - filtered)
    unlearned = _UNLEARNED.get(summary.dropped or "")
    counts = {
        Reason.FAILED_CALL: summary.failed_calls,
        **by_role,
        Reason.NO_TOKEN_IDS: untrainable,
        **({unlearned: kept - filtered - untrainable} if unlearned is not None else {}),
    }
    reasons.update({reason: count for reason, count in counts.items() if count})
    return reasons


def role_reason(role: str | None, builder: TransitionBuilder) -> Reason | None:
    """Why the builder leaves out every call of ``role`` (its role filter, or its policies); None if it trains them."""
    if builder.policies is None:
        return None if role_matches(builder.roles, role) else Reason.FILTERED_ROLE
    try:
        policy = Policies(builder.policies).policy_of(role)
    except ConfigError:  # two policies name the role: the run stops on it; the list shows it untrained
        return Reason.NO_POLICY
    if policy is None:
        return Reason.NO_POLICY
    return Reason.FROZEN_POLICY if builder.policies[policy].frozen else None


def refused_roles(roles: set[str], builder: TransitionBuilder, reason: Reason = Reason.FILTERED_ROLE) -> list[str]:
    """The roles among ``roles`` whose calls the builder leaves out for ``reason`` (its role filter, its policies)."""
    return sorted(role for role in roles if role_reason(role, builder) is reason)


def reason_filter(reason: Reason, builder: TransitionBuilder, roles: set[str]) -> SummaryFilter:
    """The summaries with at least one call left out for ``reason``; ``roles`` are the store's known roles.

    A retried attempt's calls are never counted by the list (it judges latest attempts), nor a call
    no update has used, so those reasons match nothing here; the rollout page shows them.
    """
    trained = [RolloutStatus.SUCCEEDED, *([RolloutStatus.FAILED] if builder.include_failed else [])]
    match reason:
        case Reason.NOT_FINISHED:
            return SummaryFilter(statuses=[RolloutStatus.QUEUED, RolloutStatus.RUNNING], min_calls=1)
        case Reason.CANCELLED:
            return SummaryFilter(statuses=[RolloutStatus.CANCELLED], min_calls=1)
        case Reason.FAILED_ROLLOUT:
            return NOTHING if builder.include_failed else SummaryFilter(statuses=[RolloutStatus.FAILED], min_calls=1)
        case Reason.STALE | Reason.AGED_OUT:
            dropped = next(value for value, known in _DROPS.items() if known is reason)
            return SummaryFilter(dropped=dropped, min_calls=1)
        case Reason.UPDATE_SKIPPED | Reason.NO_SIGNAL:
            dropped = next(value for value, known in _UNLEARNED.items() if known is reason)
            return SummaryFilter(statuses=trained, mode=Mode.TRAIN, dropped=dropped, min_calls=1)
        case Reason.NOT_UPDATED:
            return NOTHING
        case Reason.VALIDATION:
            return SummaryFilter(statuses=trained, mode=Mode.VAL, min_calls=1)
        case Reason.FAILED_CALL:
            return SummaryFilter(statuses=trained, mode=Mode.TRAIN, min_failed_calls=1)
        case Reason.NO_TOKEN_IDS:
            return SummaryFilter(statuses=trained, mode=Mode.TRAIN, min_untrainable_calls=1)
        case Reason.FILTERED_ROLE | Reason.NO_POLICY | Reason.FROZEN_POLICY:
            refused = refused_roles(roles, builder, reason)
            return SummaryFilter(statuses=trained, mode=Mode.TRAIN, roles=refused) if refused else NOTHING
        case Reason.RETRIED_ATTEMPT | Reason.OTHER_POLICY | Reason.INEXACT:
            return NOTHING


def both(first: SummaryFilter, second: SummaryFilter) -> SummaryFilter:
    """Summaries that pass both filters (fields set in only one are kept; list fields intersect)."""
    fields = first.model_dump(exclude_none=True)
    for name, value in second.model_dump(exclude_none=True).items():
        if name not in fields:
            fields[name] = value
        elif isinstance(value, list):
            fields[name] = [item for item in fields[name] if item in value]
        elif fields[name] != value:
            return NOTHING
    return SummaryFilter.model_validate(fields)
