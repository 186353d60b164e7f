"""Which policy serves a call: the role its request names, mapped by the run's policies.

With several policies (``Trainer(policies=...)``, :mod:`relight.policies`) each role's calls are
served by its own policy, which the upstream knows by the policy's name (relight-torch's vLLM serves
each policy's LoRA adapter under it). A call that asks for the run's model (the name agents are told
to use) and names a role a policy names goes upstream with ``model`` set to that policy's name; its
answer still names the model the client asked for. A call whose role no policy names goes upstream
unchanged, served by the base model. A call whose request names no role (see
:mod:`relight.tracing.request_role`) goes upstream unchanged too, and its span says so
(``relight.policy.unrouted``): it is never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from relight import semconv
from relight.errors import ConfigError
from relight.gateway.errors import GatewayError
from relight.policies import Policies, Policy, as_policies
from relight.tracing.request_role import BAGGAGE_HEADER, role_of_baggage

__all__ = ["PolicyRouter", "Routed", "role_of_headers"]

Json = dict[str, Any]


def role_of_headers(headers: Mapping[str, str]) -> str | None:
    """The role a request names in its W3C ``baggage`` header (``relight.role=…``); None when it names none."""
    return role_of_baggage(headers.get(BAGGAGE_HEADER))


@dataclass(frozen=True, slots=True)
class Routed:
    """A call's request as it goes upstream, and what its span records about the choice."""

    body: Json
    attributes: dict[str, JsonValue]
    asked_model: str | None = None
    """The model the client asked for, when the body going upstream names another (the policy's)."""


class PolicyRouter:
    """Chooses the policy that serves each call of a run with several policies.

    Args:
        policies: the run's policies by name (a :class:`relight.Policy` or a role filter each).
        model: the model name the run's agents ask for; calls asking for another model are not routed.
    """

    def __init__(self, policies: Mapping[str, Policy | str | Sequence[str] | re.Pattern[str]], model: str) -> None:
        self.policies = Policies(as_policies(policies))
        self.model = model

    def route(self, body: Json, role: str | None) -> Routed:
        """``body`` as it goes upstream for a call made by ``role`` (None: its request named no role).

        Raises:
            GatewayError: 400 when two policies name ``role``.
        """
        if body.get("model") != self.model:
            return Routed(body, {})
        if role is None:
            return Routed(body, {semconv.POLICY_UNROUTED: True})
        try:
            policy = self.policies.policy_of(role)
        except ConfigError as error:
            raise GatewayError(400, str(error), param="model") from None
        if policy is None:
            return Routed(body, {})
        return Routed({**body, "model": policy}, {semconv.POLICY: policy}, asked_model=self.model)
