"""Replicas of the policy behind the gateway, and how a stream is read from any of them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterable, Sequence
from contextlib import contextmanager

from relight.algorithm import UpstreamTarget
from relight.engine import Engine
from relight.gateway.upstreams.engine import EngineUpstream
from relight.gateway.upstreams.openai_server import OpenAIUpstream
from relight.gateway.upstreams.protocol import Endpoint, Json, Upstream

__all__ = ["UpstreamPool", "as_upstream", "bursts_of"]


def bursts_of(upstream: Upstream, endpoint: Endpoint, body: Json) -> AsyncIterator[Iterable[Json]]:
    """``upstream``'s stream, the chunks that arrived together as one iterable (:meth:`OpenAIUpstream.bursts`),
    or one by one from any other upstream. Read each to its end before asking for the next."""
    if isinstance(upstream, OpenAIUpstream):
        return upstream.bursts(endpoint, body)
    return _one_by_one(upstream.stream(endpoint, body))


async def _one_by_one(chunks: AsyncIterator[Json]) -> AsyncIterator[Iterable[Json]]:
    async for chunk in chunks:
        yield (chunk,)


def as_upstream(target: UpstreamTarget | Upstream) -> Upstream:
    """An upstream for an engine, a base URL, or an upstream as is."""
    if isinstance(target, str):
        return OpenAIUpstream(target)
    if isinstance(target, Engine):
        return EngineUpstream(target)
    return target


class UpstreamPool:
    """Replicas of one policy. A rollout stays on the replica it first got (its prefix cache is there);
    a new rollout goes to the replica with the fewest calls in flight, then the fewest rollouts."""

    def __init__(self, upstreams: Sequence[Upstream], *, max_remembered: int = 65536) -> None:
        if not upstreams:
            raise ValueError("upstreams must name at least one model server or engine")
        self.upstreams = list(upstreams)
        self._in_flight = [0] * len(self.upstreams)
        self._rollouts = [0] * len(self.upstreams)
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._max_remembered = max_remembered

    def replica_of(self, rollout_id: str) -> int:
        index = self._sticky.get(rollout_id)
        if index is not None:
            self._sticky.move_to_end(rollout_id)
            return index
        index = min(range(len(self.upstreams)), key=lambda i: (self._in_flight[i], self._rollouts[i]))
        self._sticky[rollout_id] = index
        self._rollouts[index] += 1
        if len(self._sticky) > self._max_remembered:
            _, forgotten = self._sticky.popitem(last=False)
            self._rollouts[forgotten] -= 1
        return index

    @contextmanager
    def use(self, rollout_id: str) -> Generator[Upstream]:
        """The rollout's replica, counted as busy for the duration."""
        index = self.replica_of(rollout_id)
        self._in_flight[index] += 1
        try:
            yield self.upstreams[index]
        finally:
            self._in_flight[index] -= 1

    async def aclose(self) -> None:
        for upstream in self.upstreams:
            await upstream.aclose()
