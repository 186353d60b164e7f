"""The gateway: forwards each call of a rollout attempt to the policy and records it as an LLM span.

:meth:`Gateway.complete` and :meth:`Gateway.stream` are the whole request path (admission, pause
gate, replica choice, forwarding, recording, the response id the client sees), apart from HTTP: the
routes (:mod:`relight.gateway.http.app`; the foreign APIs in :mod:`relight.gateway.dialects`) parse
their request, call one of them and shape the answer. The steps of the path live in
:mod:`relight.gateway.calls`, the upstreams in :mod:`relight.gateway.upstreams`; the gateway serves
itself through relight's one ASGI server (:class:`relight._internal.server.AsgiServer`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic import JsonValue
from starlette.requests import Request

from relight import semconv
from relight._internal.ids import random_hex
from relight._internal.server import AsgiServer
from relight.algorithm import UpstreamTarget
from relight.gateway.calls.for_client import ForClient, shaped_chunks
from relight.gateway.calls.record import Exchange, TraceParent
from relight.gateway.calls.recorder import SpanRecorder, is_power_of_ten
from relight.gateway.calls.retokenize import Retokenizer
from relight.gateway.calls.routing import PolicyRouter
from relight.gateway.calls.validate import check_request
from relight.gateway.errors import GatewayError, UpstreamError
from relight.gateway.http.app import create_app
from relight.gateway.overflow import ContextOverflow, openai_message, overflow_of
from relight.gateway.sessions import SessionChecker, api_key_for, attempt_of_request
from relight.gateway.stats import GatewayStats
from relight.gateway.upstreams import Endpoint, Upstream, UpstreamPool, as_upstream, bursts_of
from relight.gateway.urls import attempt_base_url
from relight.policies import Policy
from relight.store import Store
from relight.tracing.batcher import SpanBatcher
from relight.tracing.context import AttemptRef

__all__ = ["Gateway", "GatewayStats"]

logger = logging.getLogger(__name__)

Json = dict[str, Any]


class Gateway(AsgiServer):
    """An OpenAI-compatible server in front of the policy that records every call of every rollout.

    Args:
        store: where LLM spans go, and where attempts are checked before their first call.
        upstreams: the policy's replicas: in-process engines, OpenAI-compatible base URLs or
            :class:`~relight.gateway.upstreams.Upstream` objects.
        retokenizer: makes token ids for calls whose upstream returned none. Without one, the
            served model's own tokenizer is used where transformers finds it on this machine (the
            model name is a local folder or in the Hugging Face cache); else such calls are
            recorded without ids and counted as untrainable.
        policy_version: recorded on each span unless the upstream reports its own; the trainer
            sets :attr:`policy_version` after each update.
        max_body_bytes: larger requests are refused with 413.
        default_max_tokens: the output cap given to a chat or completions request that sets none
            (``max_tokens``/``max_completion_tokens``), so one call cannot generate for ever; None
            leaves it to the upstream. Recorded on the span like a cap the client set.
        batcher: where spans are submitted; by default one of the gateway's own, on its loop.
        policies: several policies, one per role (see :mod:`relight.gateway.calls.routing`): a call asking for
            ``model`` is sent upstream as its role's policy (the role its request names).
        model: the model name the run's agents ask for; needed with ``policies``.

    Serve it with ``async with`` on the event loop the store belongs to (``with`` serves it on a
    thread of its own, which suits stores that any loop may use, such as the HTTP store).
    """

    def __init__(
        self,
        store: Store,
        upstreams: Sequence[UpstreamTarget | Upstream],
        *,
        retokenizer: Retokenizer | None = None,
        policy_version: int | None = None,
        max_body_bytes: int = 32 * 2**20,
        default_max_tokens: int | None = None,
        batcher: SpanBatcher | None = None,
        policies: Mapping[str, Policy | str | Sequence[str] | re.Pattern[str]] | None = None,
        model: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if policies is not None and not model:
            raise ValueError("Gateway(policies=...) needs model=<the model name the run's agents ask for>")
        self.store = store
        self.router = PolicyRouter(policies, model) if policies is not None and model else None
        """Chooses each call's policy in a run with several policies; None serves every call as asked."""
        self.pool = UpstreamPool([as_upstream(target) for target in upstreams])
        self.policy_version = policy_version
        self.max_body_bytes = max_body_bytes
        self.default_max_tokens = default_max_tokens
        self.stats = GatewayStats()
        self._sessions = SessionChecker(store)
        self._recorder = SpanRecorder(store, self.stats, self._sessions, retokenizer=retokenizer, batcher=batcher)
        self._open = asyncio.Event()
        self._open.set()
        self._drained = asyncio.Event()
        self._in_flight = 0
        self._held = 0
        super().__init__(create_app(self), host=host, port=port)

    # -- life -------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._recorder.start()
        await super().start()

    async def stop(self) -> None:
        """Finish open calls, write every span, close upstream connections."""
        await super().stop()
        await self._recorder.stop()
        await self.pool.aclose()

    async def flush(self) -> None:
        """Return once the span of every call answered so far is in the store."""
        await self._recorder.flush()

    async def end_attempt(self, session: AttemptRef) -> None:
        """Refuse the attempt's calls from now on; return once the spans of its calls are in the store.

        The runner calls this (``POST …/relight/end``) before it finishes an attempt, so no reader
        sees a finished attempt whose LLM spans are still on their way. Raises GatewayError (503)
        when some of them could not be written: the attempt must then fail, not succeed with a hole.
        """
        self._sessions.end(session)
        await self._recorder.flush_attempt(session)

    def base_url_for(self, rollout_id: str, attempt_id: str) -> str:
        """The OpenAI base URL that scopes an agent's calls to one attempt."""
        return attempt_base_url(self.url, rollout_id, attempt_id)

    @staticmethod
    def api_key_for(rollout_id: str, attempt_id: str) -> str:
        """The API key that scopes calls to ``{url}/v1`` to one attempt."""
        return api_key_for(rollout_id, attempt_id)

    # -- pause and drain --------------------------------------------------------------------------

    async def pause(self) -> None:
        """Hold new calls at the door and return once the calls in flight have finished."""
        self._open.clear()
        while self._in_flight:
            self._drained.clear()
            await self._drained.wait()

    def resume(self) -> None:
        """Let held and new calls through."""
        self._open.set()

    @asynccontextmanager
    async def paused(self) -> AsyncGenerator[None]:
        """No call is in flight inside the block (weights can be swapped); held calls go on after it."""
        await self.pause()
        try:
            yield
        finally:
            self.resume()

    @property
    def is_paused(self) -> bool:
        return not self._open.is_set()

    @property
    def in_flight(self) -> int:
        """Calls being served now."""
        return self._in_flight

    @property
    def held(self) -> int:
        """Calls waiting for :meth:`resume`."""
        return self._held

    async def _enter(self) -> None:
        if not self._open.is_set():
            self._held += 1
            try:
                await self._open.wait()
            finally:
                self._held -= 1
        self._in_flight += 1

    def _leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._drained.set()

    # -- the request path -------------------------------------------------------------------------

    async def session(self, request: Request) -> AttemptRef:
        """The attempt an HTTP request belongs to (by its path, else its API key), checked against the store."""
        session = attempt_of_request(request)
        await self._sessions.check(session)
        request.state.relight_session = session  # a refusal from here on is recorded on this attempt
        return session

    async def complete(
        self,
        session: AttemptRef,
        endpoint: Endpoint,
        body: Json,
        *,
        response_id: str | None = None,
        trace_parent: TraceParent | None = None,
        attributes: dict[str, JsonValue] | None = None,
        role: str | None = None,
        cap_budget: bool = False,
    ) -> Json:
        """Run a non-streaming request on the session's replica, record its span, and return the answer.

        The answer has the minted ``response_id`` (``chatcmpl-…`` by default) and only the fields the
        client asked for; ``attributes`` go on the span. ``role`` is the role the request named (see
        :mod:`relight.gateway.calls.routing`), recorded on the span and, with policies, choosing the policy.
        Raises GatewayError: 4xx for a bad request (``context_length_exceeded`` for a prompt past the
        context), 502 when the upstream failed.
        An output budget past what the context leaves is capped and the call sent again; one past the whole
        context is refused (400 naming it) unless ``cap_budget``, which caps it too (the translated APIs,
        whose clients size it for frontier models; see :mod:`relight.gateway.overflow`).
        """
        check_request(endpoint, body)
        body = self._with_default_max_tokens(body)
        exchange = self._exchange(session, endpoint, body, response_id, trace_parent, attributes)
        routed, asked = self._route(exchange, body, role)
        await self._enter()
        try:
            with self.pool.use(session.rollout_id) as upstream:
                exchange.upstream = upstream.name
                sent = routed
                while True:
                    try:
                        answer = await upstream.complete(endpoint, sent)
                        exchange.add(answer)
                        break
                    except UpstreamError as error:
                        if (capped := self._capped(exchange, sent, error, cap_budget)) is None:
                            raise self._failed(exchange, error, sent=sent) from error
                        sent = capped
                    except (LookupError, TypeError, ValueError) as error:
                        raise self._failed(exchange, error) from error
        finally:
            self._leave()
        self._recorder.record(exchange)
        shaped = ForClient(body, exchange.response_id, model=asked)(answer)
        assert shaped is not None
        return shaped

    async def stream(
        self,
        session: AttemptRef,
        endpoint: Endpoint,
        body: Json,
        *,
        response_id: str | None = None,
        trace_parent: TraceParent | None = None,
        attributes: dict[str, JsonValue] | None = None,
        keep_prompt_ids: bool = False,
        role: str | None = None,
        cap_budget: bool = False,
    ) -> AsyncIterator[Iterator[Json]]:
        """Like :meth:`complete` for ``stream: true``: yields the chunks the client should get, those
        that arrived together as one iterator (:func:`~relight.gateway.upstreams.bursts_of`), which
        records and shapes each as it is reached. Read each to its end before asking for the next.

        The span, holding the whole response, is recorded before the iterator ends, also when the
        upstream fails midway (then GatewayError is raised, after the chunks before the failure)
        or the client goes away. ``keep_prompt_ids`` leaves the upstream's ``prompt_token_ids`` in the
        chunks (a route that reports the prompt's length up front, as Anthropic's ``message_start`` does).
        """
        check_request(endpoint, body)
        body = self._with_default_max_tokens(body)
        exchange = self._exchange(session, endpoint, body, response_id, trace_parent, attributes)
        routed, asked = self._route(exchange, body, role)
        await self._enter()
        try:
            with self.pool.use(session.rollout_id) as upstream:
                exchange.upstream = upstream.name
                for_client = ForClient(body, exchange.response_id, keep_prompt_ids=keep_prompt_ids, model=asked)
                broken: list[Exception] = []  # what ended a burst early: raised once its chunks are out
                sent, started = routed, False
                try:
                    while True:
                        try:
                            async for burst in bursts_of(upstream, endpoint, sent):
                                started = True
                                yield shaped_chunks(exchange, for_client, burst, broken)
                                if broken:
                                    raise broken[0]
                            break
                        except UpstreamError as error:
                            if started or (capped := self._capped(exchange, sent, error, cap_budget)) is None:
                                raise
                            sent = capped
                except (UpstreamError, LookupError, TypeError, ValueError) as error:
                    raise self._failed(exchange, error, record=False, sent=sent) from error
                except (asyncio.CancelledError, GeneratorExit):
                    exchange.fail("the client went away before the stream ended", error_type="client_disconnected")
                    raise
        finally:
            self._leave()
            self._recorder.record(exchange)

    def _route(self, exchange: Exchange, body: Json, role: str | None) -> tuple[Json, str | None]:
        """The body to send upstream (the role's policy as its model, with policies) and the model name the
        client asked for when that differs; the role and the choice go on the span."""
        if role is not None:
            exchange.attributes[semconv.ROLE] = role
        if self.router is None:
            return body, None
        routed = self.router.route(body, role)
        if routed.attributes:
            exchange.attributes.update(routed.attributes)
        return routed.body, routed.asked_model

    def _with_default_max_tokens(self, body: Json) -> Json:
        """``body`` with :attr:`default_max_tokens` when it sets no output cap of its own."""
        if self.default_max_tokens is None or body.get("max_tokens") or body.get("max_completion_tokens"):
            return body
        return {**body, "max_tokens": self.default_max_tokens}

    def _exchange(
        self,
        session: AttemptRef,
        endpoint: Endpoint,
        body: Json,
        response_id: str | None,
        trace_parent: TraceParent | None,
        attributes: dict[str, JsonValue] | None = None,
    ) -> Exchange:
        self.stats.calls += 1
        prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
        return Exchange(
            session=session,
            endpoint=endpoint,
            request=body,
            response_id=response_id or f"{prefix}-{random_hex(24)}",
            policy_version=self.policy_version,
            trace_parent=trace_parent,
            attributes=dict(attributes or {}),
        )

    def _capped(self, exchange: Exchange, sent: Json, error: UpstreamError, cap_budget: bool) -> Json | None:
        """``sent`` with its output budget capped at what the context leaves, when that is all that did not
        fit (and it was not capped already, and it is within the whole context unless ``cap_budget``); else
        None. The span marks the cap."""
        overflow = _overflow(error)
        budget_key, budget = _budget(sent)
        if overflow is None or not overflow.prompt_fits or semconv.MAX_TOKENS_CAPPED in exchange.attributes:
            return None
        room = overflow.room
        assert room is not None
        if not isinstance(budget, int) or budget <= room:
            return None
        if budget > overflow.context_length and not cap_budget:
            return None
        self.stats.capped += 1
        exchange.attributes[semconv.MAX_TOKENS_CAPPED] = room
        return {**sent, budget_key: room}

    def refused(self, session: AttemptRef | None, request: Json | None, error: GatewayError) -> None:
        """Count a request the gateway refused, and record it as a failed LLM span of ``session`` (the
        attempt it was admitted for; None when it names no running attempt, which is only counted).

        The span holds the status, the reason and what was asked (model, messages or input), never token
        ids: nothing reached the model. The 1st, 10th, 100th… refusal is logged, so a misconfigured agent
        is seen without flooding the log.
        """
        if error.recorded:
            return
        error.recorded = True
        self.stats.refused += 1
        if is_power_of_ten(self.stats.refused):
            logger.warning(
                "relight: %d request(s) refused by the gateway so far (gateway.stats.refused); the latest: %d %s",
                self.stats.refused,
                error.status_code,
                error.message,
            )
        if session is None or not self._recorder.started:
            return
        body = request or {}
        asked: Json = {"model": body.get("model", ""), "messages": body.get("messages", body.get("input"))}
        exchange = self._exchange(session, "chat", asked, None, None)
        exchange.attributes[semconv.REFUSED] = True
        exchange.attributes[semconv.HTTP_STATUS] = error.status_code
        exchange.fail(error.message, error_type=error.code or str(error.status_code))
        self._recorder.record(exchange)

    def _failed(
        self, exchange: Exchange, error: Exception, *, record: bool = True, sent: Json | None = None
    ) -> GatewayError:
        """Note the failure on the exchange (recording it unless told not to) and say what the client gets
        (``sent``: the request the upstream refused, whose output budget may be what did not fit)."""
        param = None
        if isinstance(error, UpstreamError):
            status, reason, param = error.status_code, error.message, error.param
        else:
            status, reason = None, f"the upstream's answer was malformed: {error!r}"
        overflow = _overflow(error) if isinstance(error, UpstreamError) else None
        budget_key, budget = _budget(sent or {})
        beyond = overflow is not None and isinstance(budget, int) and budget > overflow.context_length
        error_type = "context_length_exceeded" if overflow else "upstream_error" if status is None else str(status)
        exchange.fail(reason, error_type=error_type, upstream_status=status)
        if record:
            self._recorder.record(exchange)
        if beyond and overflow is not None and overflow.prompt_fits:
            refusal = GatewayError(
                400,
                f"{budget_key}: {budget} is more than the model's whole context of {overflow.context_length} tokens; "
                f"ask for at most {overflow.room} with this prompt",
                param=budget_key,
                code="invalid_value",
            )
        elif overflow is not None:
            refusal = GatewayError(400, openai_message(overflow), param="messages", code="context_length_exceeded")
            refusal.overflow = overflow
        elif status is not None and 400 <= status < 500:
            refusal = GatewayError(status, reason, param=param)
        else:
            where = f"{exchange.upstream} answered {status}" if status is not None else exchange.upstream
            refusal = GatewayError(502, f"upstream failure ({where}): {reason}", code="upstream_error")
        refusal.recorded = True
        return refusal


def _overflow(error: UpstreamError) -> ContextOverflow | None:
    """What did not fit the context, if that is why the upstream refused: from an engine's error, or
    from an HTTP server's message (vLLM's and relight_torch's wordings)."""
    if error.overflow is not None:
        return error.overflow
    return overflow_of(error.message) if error.status_code == 400 else None


def _budget(body: Json) -> tuple[str, object]:
    """The request's output budget: its name (``max_completion_tokens`` where set, else ``max_tokens``) and value."""
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return key, body.get(key)
