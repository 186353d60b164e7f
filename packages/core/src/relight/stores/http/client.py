"""The HTTP store client: a :class:`relight.store.Store` that talks to ``relight store serve``.

Open it with ``relight.open_store("http://host:8765", token=...)`` (or ``https://``); the token
may come from ``RELIGHT_STORE_TOKEN`` instead. Errors come back as the exception classes the server's
store raised. One ``add_spans`` call is one POST (split only when it would exceed the server's body
limit); agents should hand spans to a :class:`relight.tracing.batcher.SpanBatcher` rather than await a round
trip per span. ``claim`` and ``wait`` long-poll: each request is held by the server until there is an
answer or its poll limit passes, and is then repeated until the caller's own timeout.

It talks HTTP through :class:`relight._internal.http.HttpClient`, the lean keep-alive client the gateway
forwards with, because a runner process makes a store call for every claim, span batch and finish.

Transient faults (a connection the server dropped, a server restarting, a 502/503/504) are retried
with backoff and jitter under ``retry`` (a :class:`relight._internal.retry.RetryPolicy`). Every call can be
retried safely: reads, heartbeats, waits, cancels and span writes are idempotent, ``enqueue`` names
its rollouts here before sending, and record, claim, finish and publish carry a request id the server
answers retries of from its memory. Idle connections are given up after
``CLIENT_KEEP_ALIVE_SECONDS``, well before the server closes them, so that a request never goes
out on a connection the server has already closed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlencode

from pydantic import BaseModel, JsonValue

from relight._internal.http import HttpClient
from relight._internal.retry import RetryPolicy, retry_async
from relight._internal.server import CLIENT_KEEP_ALIVE_SECONDS
from relight.errors import ConfigError, InvalidStateError, LeaseLostError, StoreUnavailableError
from relight.records import (
    Attempt,
    AttemptStatus,
    Mode,
    Resources,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    Span,
    StoreStats,
    new_id,
)
from relight.store import DEFAULT_LEASE_SECONDS
from relight.stores import _rules
from relight.stores._changes import deadline_after
from relight.stores._json import spans_json
from relight.stores.http import _wire
from relight.stores.http._wire import (
    ATTEMPTS,
    CLAIMED,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_POLL_SECONDS,
    RECORDED,
    ROLLOUTS,
    SPANS,
    CancelBody,
    ClaimBody,
    EnqueueBody,
    FinishBody,
    HeartbeatBody,
    MetadataBody,
    PublishBody,
    RecordBody,
    SummariesBody,
    WaitBody,
)
from relight.summaries import SummaryFilter, SummaryPage

__all__ = ["HttpStore"]

TOKEN_ENV = "RELIGHT_STORE_TOKEN"


class HttpStore:
    """A :class:`relight.store.Store` served by a relight store server at ``url``.

    Args:
        url: ``http://host:port`` or ``https://host:port``.
        token: the server's bearer token; defaults to ``RELIGHT_STORE_TOKEN``.
        timeout: seconds to wait for a reply beyond any long poll.
        poll_seconds: how long one long-poll request asks the server to hold on.
        max_request_bytes: the server's body limit; larger span batches are split to fit.
        retry: how transient faults are retried; ``RetryPolicy(attempts=1)`` never retries.
        keep_alive_seconds: how long an idle connection is kept for reuse; below the server's.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        poll_seconds: float = DEFAULT_MAX_POLL_SECONDS,
        max_request_bytes: int = DEFAULT_MAX_BODY_BYTES,
        retry: RetryPolicy | None = None,
        keep_alive_seconds: float = CLIENT_KEEP_ALIVE_SECONDS,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"HTTP store URL {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.poll_seconds = poll_seconds
        self.max_request_bytes = max_request_bytes
        self.retry = retry or RetryPolicy()
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = HttpClient(
            self.url + _wire.PREFIX, headers=headers, timeout=timeout, keep_alive=keep_alive_seconds
        )
        self._closed = False

    # -- rollouts -----------------------------------------------------------------------------

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        _rules.check_requests(requests)  # JSON has no NaN: it would arrive as null
        # Named here, so that a retry of a request whose reply was lost finds the rollouts it made.
        named = [r if r.rollout_id else r.model_copy(update={"rollout_id": new_id("ro")}) for r in requests]
        return ROLLOUTS.validate_json(await self._post("/rollouts", EnqueueBody(requests=named)))

    async def record_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        worker_id: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> list[tuple[Rollout, Attempt]]:
        _rules.check_worker_id(worker_id)
        _rules.check_lease_seconds(lease_seconds)
        _rules.check_requests(requests)
        # Named here, so that a retry of a request whose reply was lost can recognise the rollouts it made.
        named = [r if r.rollout_id else r.model_copy(update={"rollout_id": new_id("ro")}) for r in requests]
        body = RecordBody(requests=named, worker_id=worker_id, lease_seconds=lease_seconds)
        retried: list[BaseException] = []
        try:
            reply = await self._post("/rollouts/recorded", body, once=True, on_retry=retried.append)
        except InvalidStateError:
            # A retry after a server restart (which forgets request ids) finds the rollouts that the try
            # whose reply was lost recorded: that is success, not a conflict.
            if not retried or (mine := await self._recorded_by(named, worker_id)) is None:
                raise
            return mine
        return [(claimed.rollout, claimed.attempt) for claimed in RECORDED.validate_json(reply)]

    async def _recorded_by(
        self, requests: Sequence[RolloutRequest], worker_id: str
    ) -> list[tuple[Rollout, Attempt]] | None:
        """The stored rollouts of ``requests`` if ``worker_id`` recorded every one of them as asked, else None."""
        found: list[tuple[Rollout, Attempt]] = []
        for request in requests:
            assert request.rollout_id is not None
            rollout = await self.get_rollout(request.rollout_id)
            attempts = await self.list_attempts(request.rollout_id)
            asked = (request.input, request.mode, request.metadata, request.resources_version)
            stored = (rollout.input, rollout.mode, rollout.metadata, rollout.resources_version)
            if len(attempts) != 1 or attempts[0].worker_id != worker_id or asked != stored:
                return None
            found.append((rollout, attempts[0]))
        return found

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout: float = 0.0,
        mode: Mode | None = None,
    ) -> tuple[Rollout, Attempt] | None:
        _rules.check_lease_seconds(lease_seconds)
        deadline = deadline_after(timeout)
        while True:
            poll = self._next_poll(deadline)
            body = ClaimBody(worker_id=worker_id, lease_seconds=lease_seconds, timeout=poll or 0.0, mode=mode)
            claimed = CLAIMED.validate_json(await self._post("/claim", body, poll=poll, once=True))
            if claimed is not None:
                return claimed.rollout, claimed.attempt
            if self._past(deadline):
                return None

    async def heartbeat(
        self, rollout_id: str, attempt_id: str, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Attempt:
        _rules.check_lease_seconds(lease_seconds)
        body = HeartbeatBody(rollout_id=rollout_id, attempt_id=attempt_id, lease_seconds=lease_seconds)
        return Attempt.model_validate_json(await self._post("/heartbeat", body))

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus,
        *,
        error: str | None = None,
    ) -> Rollout:
        _rules.check_client_status(status)
        body = FinishBody(rollout_id=rollout_id, attempt_id=attempt_id, status=status, error=error)
        retried: list[BaseException] = []
        try:
            return Rollout.model_validate_json(await self._post("/finish", body, once=True, on_retry=retried.append))
        except LeaseLostError:
            # A retry after a server restart (which forgets request ids) finds the attempt ended by
            # the try whose reply was lost: that is success, not a lost lease.
            if not retried:
                raise
            attempts = await self.list_attempts(rollout_id)
            if any(a.attempt_id == attempt_id and a.status is status for a in attempts):
                return await self.get_rollout(rollout_id)
            raise

    async def cancel(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        return ROLLOUTS.validate_json(await self._post("/cancel", CancelBody(rollout_ids=list(rollout_ids))))

    async def update_metadata(self, rollout_id: str, metadata: Mapping[str, JsonValue]) -> Rollout:
        _rules.check_finite(dict(metadata), "metadata")
        body = MetadataBody(rollout_id=rollout_id, metadata=dict(metadata))
        return Rollout.model_validate_json(await self._post("/metadata", body))

    async def wait(self, rollout_ids: Sequence[str], *, timeout: float | None = None) -> list[Rollout]:
        deadline = deadline_after(timeout)
        while True:
            poll = self._next_poll(deadline)
            body = WaitBody(rollout_ids=list(rollout_ids), timeout=poll)
            rollouts = ROLLOUTS.validate_json(await self._post("/wait", body, poll=poll))
            if all(rollout.is_finished for rollout in rollouts) or self._past(deadline):
                return rollouts

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return Rollout.model_validate_json(await self._get("/rollout", {"rollout_id": rollout_id}))

    async def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        group_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Rollout]:
        _rules.check_page(limit, offset)
        params = {"status": status, "mode": mode, "group_id": group_id, "limit": limit, "offset": offset}
        return ROLLOUTS.validate_json(await self._get("/rollouts", params))

    async def list_summaries(
        self, where: SummaryFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> SummaryPage:
        _rules.check_page(limit, offset)
        body = SummariesBody(where=where, limit=limit, offset=offset)
        return SummaryPage.model_validate_json(await self._post("/summaries", body))

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        return ATTEMPTS.validate_json(await self._get("/attempts", {"rollout_id": rollout_id}))

    # -- spans --------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> None:
        self._check_open()
        _rules.check_spans(spans)
        if spans:
            await self._post_spans(spans, spans_json(spans))

    async def _post_spans(self, spans: Sequence[Span], payload: bytes) -> None:
        if len(payload) <= self.max_request_bytes:
            await self._request("POST", "/spans", payload)
            return
        if len(spans) == 1:
            raise ConfigError(
                f"span {spans[0].span_id!r} is {len(payload)} bytes as JSON, over the store server's limit of "
                f"{self.max_request_bytes} bytes; trim its attributes"
            )
        half = len(spans) // 2
        for part in (spans[:half], spans[half:]):
            await self._post_spans(part, spans_json(part))

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        return SPANS.validate_json(await self._get("/spans", {"rollout_id": rollout_id, "attempt_id": attempt_id}))

    # -- resources ----------------------------------------------------------------------------

    async def publish_resources(self, items: Mapping[str, JsonValue]) -> Resources:
        _rules.check_resources(items)
        body = PublishBody(items=dict(items))
        return Resources.model_validate_json(await self._post("/resources", body, once=True))

    async def get_resources(self, version: int | None = None) -> Resources:
        _rules.check_version(version)
        return Resources.model_validate_json(await self._get("/resources", {"version": version}))

    async def stats(self) -> StoreStats:
        return StoreStats.model_validate_json(await self._get("/stats", {}))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.aclose()

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise _rules.closed()

    def _next_poll(self, deadline: float | None) -> float | None:
        """How long the next long-poll request should ask the server to hold on."""
        if deadline is None:
            return self.poll_seconds
        return min(self.poll_seconds, max(0.0, deadline - asyncio.get_running_loop().time()))

    def _past(self, deadline: float | None) -> bool:
        return deadline is not None and asyncio.get_running_loop().time() >= deadline

    async def _get(self, path: str, params: Mapping[str, object]) -> bytes:
        query = urlencode({key: str(value) for key, value in params.items() if value is not None})
        return await self._request("GET", f"{path}?{query}" if query else path)

    async def _post(
        self,
        path: str,
        body: BaseModel,
        *,
        poll: float | None = None,
        once: bool = False,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> bytes:
        """POST ``body``; ``once`` gives the call a request id, for endpoints that must not act twice."""
        headers = {_wire.REQUEST_ID_HEADER: new_id("req")} if once else None
        content = body.model_dump_json().encode()
        return await self._request("POST", path, content, poll=poll, headers=headers, on_retry=on_retry)

    async def _request(
        self,
        method: str,
        path: str,
        content: bytes = b"",
        *,
        poll: float | None = None,
        headers: Mapping[str, str] | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> bytes:
        self._check_open()
        timeout = self.timeout + (poll or 0.0)

        async def once() -> bytes:
            self._check_open()
            try:
                response = await self._client.request(
                    method, path, content, content_type="application/json", headers=headers, timeout=timeout
                )
                reply = await response.read()
            except OSError as error:  # refused, dropped, malformed or past the timeout (TimeoutError)
                raise StoreUnavailableError(f"could not reach the store server at {self.url}: {error!r}") from error
            if 200 <= response.status < 300:
                return reply
            raise _wire.error_from_reply(response.status, reply, self.url)

        return await retry_async(
            once,
            policy=self.retry,
            transient=lambda error: isinstance(error, StoreUnavailableError),
            what=f"{method} {self.url}{_wire.PREFIX}{path}",
            on_retry=on_retry,
        )
