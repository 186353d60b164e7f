"""vLLM behind the gateway while the policy it serves changes: each call goes to the current version.

Agents ask for one model name (the policy's) for the whole run. vLLM serves each policy version under
a name of its own (a LoRA adapter ``<label>-v<n>``, or the base model after a full-weight reload), so
:class:`VLLMUpstream` sends each call to the version that is current when the call starts, and reports
that version to the gateway (``policy_version`` in the answer, which the gateway records on the span and
hides from the client). Answers carry the name the call asked for again, never the adapter's.

A run with several policies (one per role: ``relight.Trainer(policies=...)``) has one route per policy:
the gateway sends a call of a policy's role with the policy's name as its model, and the call goes to
that policy's current adapter (``<policy>@v<n>``) and reports that policy's version. A call for the run's
model itself (a role no policy names) goes to the base model, as version 0.

The rule for a call in flight across a push (what a LoRA push guarantees): a call finishes on the
version it started on, token for token, and its span records that version; the old adapter is unloaded
only when the last call that uses it has finished. A full-weight reload replaces the weights under every
call at once, so the trainer pauses the gateway and lets it drain first (:meth:`relight.Trainer.fit`
does so around every update).

When relight runs the server (:class:`~relight_torch.vllm.server_process.VLLMServer`) and it dies, a call that
got no answer waits for the restarted server (which has the current weights loaded again) and goes
again; a stream that had already sent chunks fails instead, as its client has seen part of an answer.
Nothing is recorded twice: the gateway records a call once, when it ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from relight.gateway.errors import UpstreamError
from relight.gateway.upstreams import Endpoint, OpenAIUpstream
from relight_torch.vllm.server_process import VLLMServer

__all__ = ["VLLMUpstream"]

Json = dict[str, Any]


class VLLMUpstream(OpenAIUpstream):
    """A vLLM server serving ``model``'s policy versions, for the gateway.

    Args:
        base_url: The server's OpenAI base URL (``http://127.0.0.1:8000/v1``).
        model: The name agents ask for; calls for any other name go to vLLM as they are.
        served_name: The name vLLM serves version 0 under (``--served-model-name``).
        server: The server relight runs, whose restarts a call waits for; None for a server the user runs.
        restart_timeout: How long a call waits for a restart before it fails.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        served_name: str | None = None,
        server: VLLMServer | None = None,
        restart_timeout: float = 900.0,
        timeout: float = 600.0,
    ) -> None:
        super().__init__(base_url, vllm=True, timeout=timeout)
        self.model = model
        self.server = server
        self.restart_timeout = restart_timeout
        self._lock = threading.Lock()  # routes change on the learner's thread, calls run on the gateway's loop
        self._base = served_name or model
        """The base model's served name: what every policy starts on, never retired."""
        self._routes: dict[str, tuple[int, str]] = {model: (0, self._base)}
        """The model name a call asks for -> ``(policy version, served name)`` it goes to."""
        self._in_flight: Counter[str] = Counter()
        self._retiring: dict[str, Callable[[str], None]] = {}
        self.retries = 0
        """Calls that went again after a server restart."""
        self._pool_generation = 0
        """The server generation the connection pool was last emptied for."""

    @property
    def current(self) -> tuple[int, str]:
        """``(policy version, served name)`` that new calls for :attr:`model` go to."""
        return self._routes[self.model]

    def current_of(self, policy: str) -> tuple[int, str]:
        """``(policy version, served name)`` that new calls for ``policy`` go to."""
        return self._routes[policy]

    @property
    def policies(self) -> list[str]:
        """The policy names routed besides :attr:`model`."""
        return [name for name in self._routes if name != self.model]

    def route(
        self,
        version: int,
        served_name: str,
        *,
        retire: Callable[[str], None] | None = None,
        policy: str | None = None,
    ) -> None:
        """Send new calls for ``policy`` (:attr:`model` when None) to ``served_name`` as ``version``;
        ``retire(old name)`` runs once no call uses it.

        Called on the thread that pushed the new weights; ``retire`` may run on it (no call in flight on
        the old version) or later on a worker thread (when the last such call ends).
        """
        key = self.model if policy is None else policy
        with self._lock:
            _, old = self._routes.get(key, (0, served_name))
            self._routes[key] = (version, served_name)
            retire = retire if old not in (served_name, self._base) else None
            due = retire is not None and self._in_flight[old] == 0
            if retire is not None and not due:
                self._retiring[old] = retire
        if due and retire is not None:
            retire(old)

    def in_flight(self, served_name: str) -> int:
        with self._lock:
            return self._in_flight[served_name]

    def _enter(self, body: Json) -> tuple[int | None, str | None, Json]:
        asked = body.get("model") or self.model
        with self._lock:
            route = self._routes.get(asked)
            if route is None:  # a name this run does not train: vLLM answers it as it is
                return None, None, body
            version, name = route
            self._in_flight[name] += 1
        return version, name, {**body, "model": name}

    def _leave(self, name: str | None) -> None:
        if name is None:
            return
        with self._lock:
            self._in_flight[name] -= 1
            retire = self._retiring.pop(name, None) if self._in_flight[name] == 0 else None
        if retire is not None:  # a blocking HTTP call: off the event loop
            threading.Thread(target=retire, args=(name,), name="relight-vllm-retire", daemon=True).start()

    @staticmethod
    def _versioned(answer: Json, version: int | None, asked: str) -> Json:
        if version is not None:
            answer["policy_version"] = version
            answer["model"] = asked
        return answer

    async def _recovered(self, error: UpstreamError, generation: int) -> bool:
        """Whether a call that failed with ``error`` may go again: the server died and is back."""
        if error.status_code is not None or self.server is None:
            return False
        recovered = await asyncio.to_thread(self.server.recovered_since, generation, self.restart_timeout)
        if recovered:
            self.retries += 1
            await self._drop_dead_connections()
        return recovered

    async def _drop_dead_connections(self) -> None:
        """Empty the connection pool once per restart (its connections went to the dead process): the calls
        that recover after the first must not close the pool it already sends through again."""
        generation = self._generation()
        if self._pool_generation < generation:
            self._pool_generation = generation
            await OpenAIUpstream.aclose(self)

    def _generation(self) -> int:
        return self.server.generation if self.server is not None else 0

    async def complete(self, endpoint: Endpoint, body: Json) -> Json:
        version, name, routed = self._enter(body)
        asked = body.get("model") or self.model
        try:
            while True:
                generation = self._generation()
                try:
                    return self._versioned(await OpenAIUpstream.complete(self, endpoint, routed), version, asked)
                except UpstreamError as error:
                    if not await self._recovered(error, generation):
                        raise
        finally:
            self._leave(name)

    async def bursts(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Iterator[Json]]:
        version, name, routed = self._enter(body)
        asked = body.get("model") or self.model
        try:
            while True:
                generation = self._generation()
                started = False
                try:
                    async for burst in OpenAIUpstream.bursts(self, endpoint, routed):
                        started = True
                        yield (self._versioned(chunk, version, asked) for chunk in burst)
                    return
                except UpstreamError as error:
                    if started or not await self._recovered(error, generation):
                        raise
        finally:
            self._leave(name)

    async def models(self) -> list[str]:
        return [self.model]
