"""How a run turns calls into transitions, kept with the resources it publishes, so readers judge as it did.

``relight show``, ``relight export`` and the dashboard say why each call was or was not trained.
That depends on the run's role filter or policies and on whether it trains failed rollouts, which live in the
:class:`relight.TransitionBuilder` given to :class:`relight.Trainer`: a reader started later must not
have to be told them again. So the trainer publishes them with every policy version, as the
resources item ``relight.transitions`` (:func:`describe`), and readers rebuild the builder from the
store (:func:`builder_of_run`).
"""

from __future__ import annotations

import re
from typing import cast

from pydantic import JsonValue

from relight.errors import NotFoundError
from relight.policies import Policy, RoleFilter
from relight.store import Store
from relight.transitions.builder import TransitionBuilder

__all__ = [
    "POLICY_METRICS_ITEM",
    "POLICY_VERSIONS_ITEM",
    "TRANSITIONS_ITEM",
    "builder_of_run",
    "describe",
    "latest_items",
    "run_model",
]

TRANSITIONS_ITEM = "relight.transitions"
POLICY_VERSIONS_ITEM = "policy_versions"
"""The resources item of a run with several policies: each policy's version, as the algorithm reports it."""
POLICY_METRICS_ITEM = "relight.policy_metrics"
"""The resources item of a run with several policies: per policy, what the update that made this version
reported (``{"writer": {"loss": …, "reward": …, "transitions": …, "calls_left_out": …}}``)."""


def describe(builder: TransitionBuilder) -> dict[str, JsonValue]:
    """The builder's role filter (a regular expression, or a list of exact roles), its policies (each one's
    roles and whether it is frozen; absent in a run of one policy), ``include_failed`` and ``include_inexact``."""
    described: dict[str, JsonValue] = {
        "roles": _described(builder.roles),
        "include_failed": builder.include_failed,
        "include_inexact": builder.include_inexact,
    }
    if builder.policies is not None:
        described["policies"] = {
            name: {"roles": _described(policy.roles), "frozen": policy.frozen}
            for name, policy in builder.policies.items()
        }
    return described


def _described(roles: RoleFilter) -> JsonValue:
    if roles is None or isinstance(roles, str):
        return roles
    if isinstance(roles, re.Pattern):
        return roles.pattern
    return {"exact": list(roles)}


def _roles(value: JsonValue) -> RoleFilter:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(exact := value.get("exact"), list):
        return [str(role) for role in cast(list[JsonValue], exact)]
    return None


async def latest_items(store: Store) -> dict[str, JsonValue]:
    try:
        return (await store.get_resources()).items
    except NotFoundError:
        return {}


async def builder_of_run(store: Store) -> TransitionBuilder | None:
    """The builder the run that wrote ``store`` used; None when no trainer published one (a dev store)."""
    described = (await latest_items(store)).get(TRANSITIONS_ITEM)
    if not isinstance(described, dict):
        return None
    return TransitionBuilder(
        roles=_roles(described.get("roles")),
        policies=_policies(described.get("policies")),
        include_failed=described.get("include_failed") is True,
        include_inexact=described.get("include_inexact") is True,
    )


def _policies(value: JsonValue) -> dict[str, Policy] | None:
    if not isinstance(value, dict) or not value:
        return None
    policies: dict[str, Policy] = {}
    for name, policy in value.items():
        if isinstance(policy, dict):
            policies[name] = Policy(roles=_roles(policy.get("roles")), frozen=policy.get("frozen") is True)
    return policies or None


async def run_model(store: Store) -> str | None:
    """The model the run served, as it published it (a path or hub name a tokenizer may load from)."""
    model = (await latest_items(store)).get("model")
    return model if isinstance(model, str) else None
