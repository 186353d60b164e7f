"""Which rollout attempt a call belongs to: from the URL path, or from a per-attempt API key.

Most clients take a base URL (``…/rollouts/<rollout>/attempts/<attempt>/v1``); for those that
cannot change the path, the key itself names the attempt (``rlk-<base64 of the ids>``). The key
grants nothing the path does not: both only reach an attempt that is running in the store,
which the gateway checks before forwarding the first call of each attempt. Once the runner has
ended an attempt (:meth:`SessionChecker.end`), its calls are refused with 409, so a timed-out
agent that goes on calling is never recorded as training data. A store that cannot be reached
makes the gateway answer 503 with ``Retry-After``: the OpenAI clients retry that by themselves.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict

from starlette.requests import Request

from relight.errors import NotFoundError, StoreError
from relight.gateway.errors import GatewayError
from relight.store import Store
from relight.tracing.context import AttemptRef

__all__ = ["API_KEY_PREFIX", "SessionChecker", "api_key_for", "attempt_of_api_key", "attempt_of_request"]

API_KEY_PREFIX = "rlk-"
RETRY_AFTER_SECONDS = 2


def api_key_for(rollout_id: str, attempt_id: str) -> str:
    """The API key that scopes calls to one attempt, for clients that cannot change the base URL's path."""
    payload = json.dumps([rollout_id, attempt_id], separators=(",", ":")).encode()
    return API_KEY_PREFIX + base64.urlsafe_b64encode(payload).decode().rstrip("=")


def attempt_of_api_key(key: str) -> AttemptRef:
    """The attempt an API key names. Raises GatewayError (401) for a key the gateway did not make."""
    if not key.startswith(API_KEY_PREFIX):
        raise GatewayError(
            401,
            "calls to /v1 must carry a relight attempt key (Authorization: Bearer rlk-… or x-api-key: rlk-…) "
            "or use the "
            "/rollouts/<rollout_id>/attempts/<attempt_id>/v1 base URL",
            code="invalid_api_key",
        )
    encoded = key[len(API_KEY_PREFIX) :]
    try:
        rollout_id, attempt_id = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError, TypeError):
        raise GatewayError(
            401, f"the API key {key[:40]!r} is not a relight attempt key", code="invalid_api_key"
        ) from None
    return AttemptRef(str(rollout_id), str(attempt_id))


def attempt_of_request(request: Request) -> AttemptRef:
    """The attempt a gateway request names: by its path, else by its API key (not yet checked)."""
    rollout_id = request.path_params.get("rollout_id")
    attempt_id = request.path_params.get("attempt_id")
    if rollout_id is not None and attempt_id is not None:
        return AttemptRef(str(rollout_id), str(attempt_id))
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    key = token.strip() if scheme.lower() == "bearer" else ""
    if not key.startswith(API_KEY_PREFIX):
        # Anthropic's clients send the key in x-api-key (Claude Code with ANTHROPIC_API_KEY), OpenAI's as a bearer.
        key = request.headers.get("x-api-key", "").strip() or key
    return attempt_of_api_key(key)


class SessionChecker:
    """Admits calls only for attempts that are running in the store, asking the store once per attempt."""

    def __init__(self, store: Store, *, remember: int = 65536) -> None:
        self.store = store
        self._known: OrderedDict[AttemptRef, None] = OrderedDict()
        self._ended: OrderedDict[AttemptRef, None] = OrderedDict()
        self._remember = remember

    def end(self, session: AttemptRef) -> None:
        """Refuse the attempt's calls from now on: its runner has ended it."""
        self._known.pop(session, None)
        _remember(self._ended, session, self._remember)

    def has_ended(self, session: AttemptRef) -> bool:
        return session in self._ended

    async def check(self, session: AttemptRef) -> None:
        """Raises GatewayError: 404 for an unknown rollout or attempt, 409 for one that is not running,
        503 when the store cannot be asked."""
        if session in self._ended:
            raise _ended(session, "ended")
        if session in self._known:
            return
        try:
            attempts = await self.store.list_attempts(session.rollout_id)
        except NotFoundError:
            raise GatewayError(404, f"rollout {session.rollout_id!r} does not exist", code="unknown_rollout") from None
        except StoreError as error:
            raise GatewayError(
                503,
                f"the store is unavailable, so the attempt cannot be checked; retry shortly ({error})",
                code="store_unavailable",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            ) from error
        attempt = next((a for a in attempts if a.attempt_id == session.attempt_id), None)
        if attempt is None:
            raise GatewayError(
                404,
                f"attempt {session.attempt_id!r} of rollout {session.rollout_id!r} does not exist",
                code="unknown_attempt",
            )
        if attempt.is_finished:
            raise _ended(session, attempt.status.value)
        _remember(self._known, session, self._remember)


def _ended(session: AttemptRef, status: str) -> GatewayError:
    return GatewayError(
        409,
        f"attempt {session.attempt_id!r} of rollout {session.rollout_id!r} is {status}, "
        "not running; its calls can no longer be recorded",
        code="attempt_finished",
    )


def _remember(seen: OrderedDict[AttemptRef, None], session: AttemptRef, size: int) -> None:
    seen[session] = None
    if len(seen) > size:
        seen.popitem(last=False)
