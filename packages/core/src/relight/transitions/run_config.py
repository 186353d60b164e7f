"""How a run turns calls into transitions, kept with the resources it publishes, so readers judge as it did.

``relight show``, ``relight export`` and the dashboard say why each call was or was not trained.
That depends on the run's role filter and on whether it trains failed rollouts, which live in the
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
from relight.store import Store
from relight.transitions.builder import RoleFilter, TransitionBuilder

__all__ = ["TRANSITIONS_ITEM", "builder_of_run", "describe", "latest_items", "run_model"]

TRANSITIONS_ITEM = "relight.transitions"


def describe(builder: TransitionBuilder) -> dict[str, JsonValue]:
    """The builder's role filter (a regular expression, or a list of exact roles) and ``include_failed``."""
    roles = builder.roles
    described: JsonValue
    if roles is None or isinstance(roles, str):
        described = roles
    elif isinstance(roles, re.Pattern):
        described = roles.pattern
    else:
        described = {"exact": list(roles)}
    return {"roles": described, "include_failed": builder.include_failed}


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
        roles=_roles(described.get("roles")), include_failed=described.get("include_failed") is True
    )


async def run_model(store: Store) -> str | None:
    """The model the run served, as it published it (a path or hub name a tokenizer may load from)."""
    model = (await latest_items(store)).get("model")
    return model if isinstance(model, str) else None
