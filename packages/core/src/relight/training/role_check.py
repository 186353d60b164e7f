"""An early check of the role filter, or of the policies, against the roles an agent really uses.

A role filter that matches nothing (a typo, or a full-match habit from another tool) would
otherwise cost the whole rollout phase, minutes on a real model, before an update finds no
transition to train on. :class:`RoleCheck` looks at the first rollouts that finish and stops the
run at once, naming the filter and every role it saw. With several policies it stops the run when
no policy names any role seen, or when two policies name one role.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from relight import semconv
from relight.errors import ConfigError
from relight.policies import Policies, Policy
from relight.records import Rollout, RolloutStatus, SpanKind
from relight.store import Store
from relight.transitions.builder import RoleFilter, last_attempt_spans, role_matches

__all__ = ["RoleCheck", "roles_seen"]


class RoleCheck:
    """Checks ``roles`` once, against the succeeded rollouts among the first ``sample`` to finish.

    Call :meth:`check` with a batch's rollouts as they stand, as often as they change; it reads
    spans only until it has decided, and raises :class:`relight.errors.ConfigError` when the
    filter keeps none of the calls it saw.
    """

    def __init__(self, roles: RoleFilter, *, policies: Mapping[str, Policy] | None = None, sample: int = 4) -> None:
        self.roles = roles
        self.policies = Policies(policies) if policies is not None else None
        self.sample = sample
        self.decided = roles is None and policies is None

    async def check(self, store: Store, rollouts: Sequence[Rollout]) -> None:
        if self.decided:
            return
        finished = [r for r in rollouts if r.is_finished]
        if len(finished) < min(self.sample, len(rollouts)):
            return
        succeeded = [r for r in finished if r.status is RolloutStatus.SUCCEEDED]
        seen = await roles_seen(store, succeeded)
        if not seen:  # no call finished yet: nothing to judge by
            return
        self.decided = True
        if self.policies is not None:
            self._check_policies(self.policies, seen, len(succeeded))
            return
        if any(role_matches(self.roles, role) for role in seen):
            return
        raise ConfigError(
            f"the role filter roles={self.roles!r} matches none of the roles the first {len(succeeded)} finished "
            f"rollout(s) used: {_listing(seen)}. A string is a regular expression searched in the role path "
            "(as Agent Lightning's agent_match: 'write|rewrite' keeps 'rewrite_query'); a list names exact roles."
        )

    @staticmethod
    def _check_policies(policies: Policies, seen: Counter[str | None], rollouts: int) -> None:
        """Every role seen names at most one policy (else policy_of raises), and some role names one."""
        if any(policies.policy_of(role) is not None for role in seen):
            return
        named = ", ".join(f"{name!r} ({policy.describe()})" for name, policy in policies.by_name.items())
        raise ConfigError(
            f"no policy ({named}) names any of the roles the first {rollouts} finished rollout(s) used: "
            f"{_listing(seen)}. A string is a regular expression searched in the role path; a list names exact roles."
        )


async def roles_seen(store: Store, rollouts: Sequence[Rollout]) -> Counter[str | None]:
    """How many LLM calls each role made in the rollouts' last attempts (None: calls no adapter named)."""
    seen: Counter[str | None] = Counter()
    for rollout in rollouts:
        spans = await last_attempt_spans(store, rollout.rollout_id)
        calls = [s for s in spans if s.kind is SpanKind.LLM]
        # A call that named its role on arrival (relight.role in its request) carries it on its own span;
        # role spans name the others (an adapter's role span of a call that named its role counts once).
        arrived = Counter(str(s.attributes[semconv.ROLE]) for s in calls if semconv.ROLE in s.attributes)
        spanned = Counter(
            str(s.attributes[semconv.ROLE]) for s in spans if s.kind is SpanKind.ROLE and semconv.ROLE in s.attributes
        )
        named = arrived + (spanned - arrived)
        seen.update(named)
        if len(calls) > named.total():
            seen[None] += len(calls) - named.total()
    return seen


def _listing(seen: Counter[str | None]) -> str:
    return ", ".join(
        f"{'(no role: no adapter named these calls)' if role is None else repr(role)} ({count} call(s))"
        for role, count in seen.most_common()
    )
