"""Each call's LLM span, built and written to the store just after its answer has gone out.

Building a span (validation, retokenizing) is the slowest part of recording, and no client should
wait for it: :meth:`SpanRecorder.record` queues the call and the span is built on the next turn of
the event loop, then handed to the span batcher (:class:`relight.tracing.batcher.SpanBatcher`).
A call whose upstream gave no token ids is retokenized (the configured retokenizer, else the served
model's own tokenizer where it is on this machine) or counted as untrainable. A call of an attempt
that has ended meanwhile is not recorded, and an attempt some of whose spans the batcher did not take
is failed when it ends, never left with a hole.
"""

from __future__ import annotations

import asyncio
import logging

from relight.gateway.calls.record import Exchange
from relight.gateway.calls.retokenize import HuggingFaceRetokenizer, Retokenizer
from relight.gateway.errors import GatewayError
from relight.gateway.sessions import SessionChecker
from relight.gateway.stats import GatewayStats
from relight.store import Store
from relight.tracing.batcher import SpanBatcher, SpansLostError
from relight.tracing.context import AttemptRef
from relight.tracing.hook_failures import hook_failed

__all__ = ["SpanRecorder", "is_power_of_ten"]

logger = logging.getLogger(__name__)


class SpanRecorder:
    """Writes the LLM span of each call the gateway answered, through ``batcher`` (its own by default)."""

    def __init__(
        self,
        store: Store,
        stats: GatewayStats,
        sessions: SessionChecker,
        *,
        retokenizer: Retokenizer | None = None,
        batcher: SpanBatcher | None = None,
    ) -> None:
        self.store = store
        self.stats = stats
        self.sessions = sessions
        self.retokenizer = retokenizer
        self._batcher = batcher
        self._own_batcher = batcher is None
        self._unrecorded: list[Exchange] = []
        self._unsent: set[AttemptRef] = set()
        """Attempts some of whose spans the batcher did not take (it raised): :meth:`flush_attempt` fails them."""
        self._local_tokenizers: dict[str, Retokenizer | None] = {}
        self._no_tokenizer: dict[str, str] = {}

    @property
    def started(self) -> bool:
        return self._batcher is not None

    def start(self) -> None:
        if self._batcher is None:
            self._batcher = SpanBatcher(self.store)

    async def stop(self) -> None:
        """Write every span recorded; close the batcher if it is this recorder's own."""
        self.write()
        if self._batcher is not None:
            if self._own_batcher:
                await self._batcher.aclose()
                self._batcher = None
            else:
                await self._batcher.flush()

    async def flush(self) -> None:
        """Return once the span of every call recorded so far is in the store."""
        self.write()
        if self._batcher is not None:
            await self._batcher.flush()

    async def flush_attempt(self, session: AttemptRef) -> None:
        """Return once the spans of the attempt's calls are in the store.

        Raises GatewayError (503) when some of them could not be written: the attempt must then fail,
        not succeed with a hole.
        """
        self.write()
        if session in self._unsent:
            self._unsent.discard(session)
            raise GatewayError(503, "relight's span batcher did not take the attempt's LLM spans", code="spans_lost")
        if self._batcher is None:
            return
        try:
            await self._batcher.flush_attempt(session.rollout_id, session.attempt_id)
        except SpansLostError as error:
            raise GatewayError(503, str(error), code="spans_lost") from error

    def record(self, exchange: Exchange) -> None:
        """Queue the exchange's span; it is built and submitted just after the answer has gone out.

        Building a span (validation, retokenizing) is the slowest part of recording, and no client
        should wait for it. :meth:`flush` writes queued spans first, so none is ever left behind.
        A call of an attempt that has ended meanwhile is not recorded.
        """
        if self.sessions.has_ended(exchange.session):
            self.stats.late += 1
            return
        if not self._unrecorded:
            asyncio.get_running_loop().call_soon(self.write)
        self._unrecorded.append(exchange)

    def write(self) -> None:
        """Build and submit the span of every call recorded so far."""
        exchanges, self._unrecorded = self._unrecorded, []
        if not exchanges:
            return
        if self._batcher is None:
            raise RuntimeError("the gateway is not started: call start() or use it as a context manager")
        for exchange in exchanges:
            if exchange.error is not None:
                self.stats.failed += 1
            elif not exchange.has_token_ids:
                self._fill_token_ids(exchange)
        try:
            self._batcher.submit_many([exchange.to_span() for exchange in exchanges])
        except Exception:  # a bug in recording: the attempts it cost are failed when they end, never left with a hole
            hook_failed("Gateway: sending LLM spans to the span batcher")
            self._unsent.update(exchange.session for exchange in exchanges)

    def _fill_token_ids(self, exchange: Exchange) -> None:
        retokenizer, reason = self._retokenizer_for(exchange)
        if retokenizer is not None:
            try:
                exchange.retokenize(retokenizer)
                self.stats.retokenized += 1
                return
            except Exception as error:
                reason = f"retokenizing failed: {error!r}"
        self.stats.untrainable += 1
        if is_power_of_ten(self.stats.untrainable):  # the 1st, 10th, 100th…: seen, never flooding
            logger.warning(
                "relight: %d call(s) recorded without token ids so far, which cannot be trained on "
                "(gateway.stats.untrainable); the latest, %s from upstream %s: %s",
                self.stats.untrainable,
                exchange.response_id,
                exchange.upstream,
                reason,
            )

    def _retokenizer_for(self, exchange: Exchange) -> tuple[Retokenizer | None, str]:
        """The configured retokenizer, else the served model's own tokenizer where it is on this machine."""
        if self.retokenizer is not None:
            return self.retokenizer, ""
        model = str(exchange.request.get("model") or exchange.model or "")  # the name asked for, not `name@revision`
        if model not in self._local_tokenizers:
            try:
                self._local_tokenizers[model] = HuggingFaceRetokenizer.for_model(model)
                logger.info("relight: calls to %s without token ids are retokenized with its local tokenizer", model)
            except Exception as error:  # no transformers, no such local model: the call stays untrainable
                self._local_tokenizers[model] = None
                self._no_tokenizer[model] = f"no retokenizer is configured and none was found for {model!r} ({error})"
        return self._local_tokenizers[model], self._no_tokenizer.get(model, "")


def is_power_of_ten(count: int) -> bool:
    """Whether a count is 1, 10, 100…: the counts at which a repeated warning is logged, seen and never flooding."""
    while count % 10 == 0:
        count //= 10
    return count == 1
