"""An early check of the role filter against the roles an agent really uses.

A role filter that matches nothing (a typo, or a full-match habit from another tool) would
otherwise cost the whole rollout phase, minutes on a real model, before an update finds no
transition to train on. :class:`RoleCheck` looks at the first rollouts that finish and stops the
run at once, naming the filter and every role it saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from relight import semconv
from relight.errors import ConfigError
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

    def __init__(self, roles: RoleFilter, *, sample: int = 4) -> None:
        self.roles = roles
        self.sample = sample
        self.decided = roles is None

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
        if any(role_matches(self.roles, role) for role in seen):
            return
        raise ConfigError(
            f"the role filter roles={self.roles!r} matches none of the roles the first {len(succeeded)} finished "
            f"rollout(s) used: {_listing(seen)}. A string is a regular expression searched in the role path "
            "(as Agent Lightning's agent_match: 'write|rewrite' keeps 'rewrite_query'); a list names exact roles."
        )


async def roles_seen(store: Store, rollouts: Sequence[Rollout]) -> Counter[str | None]:
    """How many LLM calls each role made in the rollouts' last attempts (None: calls no adapter named)."""
    seen: Counter[str | None] = Counter()
    for rollout in rollouts:
        spans = await last_attempt_spans(store, rollout.rollout_id)
        named = [
            str(s.attributes[semconv.ROLE]) for s in spans if s.kind is SpanKind.ROLE and semconv.ROLE in s.attributes
        ]
        calls = sum(s.kind is SpanKind.LLM for s in spans)
        seen.update(named)
        if calls > len(named):
            seen[None] += calls - len(named)
    return seen


def _listing(seen: Counter[str | None]) -> str:
    return ", ".join(
        f"{'(no role: no adapter named these calls)' if role is None else repr(role)} ({count} call(s))"
        for role, count in seen.most_common()
    )
