"""The gateway's URL scheme, in one place for the gateway's routes and for runners in other processes.

A runner holds only the gateway's root URL (it may run on another machine), so it builds an
attempt's base URL and the route that ends an attempt from these, never by hand.
"""

from __future__ import annotations

__all__ = ["ATTEMPT_SCOPE", "END_ATTEMPT", "attempt_base_url", "end_attempt_path"]

ATTEMPT_SCOPE = "/rollouts/{rollout_id}/attempts/{attempt_id}"
"""The path prefix that scopes a call to one rollout attempt."""

END_ATTEMPT = "/relight/end"
"""Under an attempt's scope: the runner's ``POST`` that ends the attempt once its spans are flushed."""


def attempt_base_url(gateway_url: str, rollout_id: str, attempt_id: str) -> str:
    """The OpenAI-style base URL (ending in ``/v1``) an attempt's LLM client is given."""
    scope = ATTEMPT_SCOPE.format(rollout_id=rollout_id, attempt_id=attempt_id)
    return f"{gateway_url.rstrip('/')}{scope}/v1"


def end_attempt_path(rollout_id: str, attempt_id: str) -> str:
    """The path, from the gateway's root, of the request that ends an attempt."""
    return ATTEMPT_SCOPE.format(rollout_id=rollout_id, attempt_id=attempt_id) + END_ATTEMPT
