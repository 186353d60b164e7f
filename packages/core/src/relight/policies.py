"""Several policies in one run, one per role: which role's calls each policy serves and learns from.

A multi-agent system trains each agent as a model of its own (a LoRA adapter per role over one base
model) by naming its policies by roles, as the role filter names the one agent it trains::

    relight.Trainer(algorithm, policies={"writer": "write_query|rewrite_query", "checker": "check_query"})

Each value is a :data:`RoleFilter` (a regular expression searched in the role path, or a list of
exact roles) or a :class:`Policy` (``frozen=True``: served by its adapter, never trained). A role
belongs to at most one policy; a role no policy names is served by the base model and not trained.
The gateway routes each call to its role's policy when it arrives (the request's ``model`` becomes
the policy's name), and the transitions carry the policy that trains them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from relight.errors import ConfigError

__all__ = [
    "POLICY_NAME",
    "Policies",
    "Policy",
    "RoleFilter",
    "as_policies",
    "check_role_filter",
    "per_policy",
    "role_matches",
]

RoleFilter = str | Sequence[str] | re.Pattern[str] | None
"""Which roles to train, as Agent Lightning's ``agent_match``:

- a string or compiled pattern is a regular expression *searched* in the role path, so
  ``"write|rewrite"`` keeps ``write_query``, ``rewrite_query`` and ``team/writer``; anchor it
  (``"^writer$"``) to match a whole path;
- a list (or tuple, set) names exact role paths: ``["team/writer"]`` keeps that role alone;
- None keeps every call, also those no adapter named.

Calls without a role (no adapter recorded a role span) are kept only by None."""

POLICY_NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""What a policy's name may be: it travels as the model name of the calls it serves, and names folders."""


def role_matches(roles: RoleFilter, role: str | None) -> bool:
    """Whether the filter ``roles`` keeps a call made by ``role`` (see :data:`RoleFilter`)."""
    if roles is None:
        return True
    if role is None:
        return False
    if isinstance(roles, str):
        return re.search(roles, role) is not None
    if isinstance(roles, re.Pattern):
        return roles.search(role) is not None
    return role in roles


def check_role_filter(roles: object, field_name: str = "roles") -> RoleFilter:
    """``roles`` if it is a :data:`RoleFilter`, a list given as one; else a ConfigError naming ``field_name``."""
    if roles is None or isinstance(roles, re.Pattern):
        return cast(RoleFilter, roles)
    if isinstance(roles, str):
        try:
            re.compile(roles)
        except re.error as error:
            raise ConfigError(f"{field_name}={roles!r} is not a valid regular expression: {error}") from None
        return roles
    if isinstance(roles, Sequence | set | frozenset) and not isinstance(roles, bytes):
        items = list(cast(Sequence[object], roles))
        wrong = [item for item in items if not isinstance(item, str)]
        if wrong:
            raise ConfigError(f"{field_name} must list roles as strings; {wrong[0]!r} is a {type(wrong[0]).__name__}")
        return [cast(str, item) for item in items]
    raise ConfigError(
        f"{field_name} must be a regular expression, a compiled pattern or a list of exact roles, "
        f"got {type(roles).__name__} {roles!r}"
    )


@dataclass(frozen=True, slots=True)
class Policy:
    """One policy of a run: the roles whose calls it serves and, unless ``frozen``, learns from.

    Args:
        roles: a :data:`RoleFilter` (a regular expression searched in the role path, or exact roles).
        frozen: serve the policy's adapter as it is and never train it (its calls are left out).
    """

    roles: RoleFilter
    frozen: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", check_role_filter(self.roles, "Policy.roles"))
        if not isinstance(cast(object, self.frozen), bool):
            raise ConfigError(f"Policy.frozen must be True or False, got {self.frozen!r}")

    def describe(self) -> str:
        """The roles as a reader would write them: the pattern, or the exact roles."""
        roles = self.roles
        if isinstance(roles, re.Pattern):
            return repr(roles.pattern)
        if isinstance(roles, str) or roles is None:
            return repr(roles)
        return repr(list(roles))


def as_policies(policies: Mapping[str, Policy | str | Sequence[str] | re.Pattern[str]]) -> dict[str, Policy]:
    """``policies`` as :class:`Policy` records by name, checked: plain names, and no role claimed by two.

    A string, pattern or list is ``Policy(roles=that)``. Two lists, a list and a pattern, or two equal
    patterns that claim one role are refused here; two different patterns that both match a role can
    only be found once that role is seen (:meth:`Policies.policy_of` raises then).

    Raises:
        relight.ConfigError: naming the policy (``policies['writer']``) and what is wrong with it.
    """
    if not isinstance(cast(object, policies), Mapping):
        raise ConfigError(
            f"policies must map policy names to roles (a dict like {{'writer': 'write_query'}}), "
            f"got {type(policies).__name__}"
        )
    if not policies:
        raise ConfigError("policies is empty: name at least one policy, e.g. policies={'writer': 'write_query'}")
    checked: dict[str, Policy] = {}
    for name, value in policies.items():
        if not isinstance(cast(object, name), str) or not POLICY_NAME.fullmatch(name):
            raise ConfigError(
                f"policies has the name {name!r}: a policy's name is letters, digits, '_', '.' or '-' "
                "(it names the policy's adapter, not the model)"
            )
        checked[name] = value if isinstance(value, Policy) else Policy(check_role_filter(value, f"policies[{name!r}]"))
    _refuse_overlaps(checked)
    return checked


def _refuse_overlaps(policies: Mapping[str, Policy]) -> None:
    names = list(policies)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            role = _shared_role(policies[first].roles, policies[second].roles)
            if role is not None:
                raise ConfigError(
                    f"policies {first!r} ({policies[first].describe()}) and {second!r} "
                    f"({policies[second].describe()}) both name {role}: a role belongs to one policy"
                )


def _shared_role(first: RoleFilter, second: RoleFilter) -> str | None:
    """A role both filters claim, in words, where that can be told without seeing the roles; None otherwise."""
    if first is None or second is None:
        return "every role"
    if isinstance(first, str | re.Pattern) and isinstance(second, str | re.Pattern):
        one = first if isinstance(first, str) else first.pattern
        other = second if isinstance(second, str) else second.pattern
        return f"every role matching {one!r}" if one == other else None
    if not isinstance(first, str | re.Pattern):
        return next((repr(role) for role in first if role_matches(second, role)), None)
    return next((repr(role) for role in cast(Sequence[str], second) if role_matches(first, role)), None)


@dataclass(slots=True)
class Policies:
    """A run's policies, resolving each role to the policy that serves it (remembered: roles are few)."""

    by_name: Mapping[str, Policy]
    _resolved: dict[str | None, str | None] = field(default_factory=dict[str | None, str | None], repr=False)

    def policy_of(self, role: str | None) -> str | None:
        """The name of the policy that serves ``role``; None when no policy names it.

        Raises:
            relight.ConfigError: two policies name ``role``.
        """
        try:
            return self._resolved[role]
        except KeyError:
            pass
        matched = [name for name, policy in self.by_name.items() if role_matches(policy.roles, role)]
        if len(matched) > 1:
            raise ConfigError(
                f"role {role!r} is named by policies "
                + " and ".join(f"{name!r} ({self.by_name[name].describe()})" for name in matched)
                + ": a role belongs to one policy"
            )
        found = matched[0] if matched else None
        if len(self._resolved) < 10_000:
            self._resolved[role] = found
        return found


def per_policy(metrics: Mapping[str, object], names: Iterable[str]) -> dict[str, dict[str, float]]:
    """A step's metrics by policy: ``{"loss/writer": 0.1, "reward/writer": 0.5}`` → ``{"writer": {"loss": 0.1,
    "reward": 0.5}}``, for the policies ``names`` (other keys with a ``/`` are not theirs)."""
    table: dict[str, dict[str, float]] = {name: {} for name in names}
    for key, value in metrics.items():
        metric, _, policy = key.rpartition("/")
        if metric and policy in table and isinstance(value, int | float) and not isinstance(value, bool):
            table[policy][metric] = float(value)
    return table
