"""What tests of runner processes and actors work on: a store served over HTTP, a scripted upstream, a gateway.

Runners in other processes (or Ray actors) reach the store by URL, so the in-memory store is served
over HTTP on loopback; the upstream and gateway run on the test's event loop, so a script can set
an :class:`asyncio.Event` the test waits on (see :func:`relight.scripted.server.first_calls_reach`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from relight._internal.server import AsgiServer
from relight.agent import Agent
from relight.gateway import Gateway
from relight.records import Rollout, RolloutRequest
from relight.runners.processes import RunnerProcesses
from relight.scripted import ScriptedUpstream
from relight.stores.http.server import create_app
from relight.stores.memory import InMemoryStore
from relight_testing.agents import three_calls

__all__ = ["Shared", "shared_loop"]


@dataclass
class Shared:
    """A store its runners reach at ``store_url``, a scripted upstream and a gateway in front of it."""

    store: InMemoryStore
    store_url: str
    gateway: Gateway
    upstream: ScriptedUpstream

    def runners(self, count: int, agent: Agent = three_calls, **options: Any) -> RunnerProcesses:
        """``count`` runner processes of ``agent`` (by default :func:`relight_testing.agents.three_calls`) here."""
        return RunnerProcesses(count, agent, self.store_url, gateway_url=self.gateway.url, model="scripted", **options)

    async def enqueue(self, tasks: list[JsonValue], max_attempts: int = 3) -> list[str]:
        """Enqueue one rollout a task; returns their ids."""
        rollouts = await self.store.enqueue([RolloutRequest(input=task, max_attempts=max_attempts) for task in tasks])
        return [rollout.rollout_id for rollout in rollouts]

    async def finish(self, ids: list[str]) -> list[Rollout]:
        """Wait for the rollouts to end and for the gateway's spans of them to be in the store."""
        rollouts = await self.store.wait(ids, timeout=120)
        await self.gateway.flush()
        return rollouts


@asynccontextmanager
async def shared_loop() -> AsyncGenerator[Shared]:
    """A fresh :class:`Shared` for the block's duration, on this event loop."""
    store = InMemoryStore()
    # Short long-polls: shutting the server down waits for the polls still held, a second at most.
    async with (
        AsgiServer(create_app(store, max_poll_seconds=1.0)) as server,
        ScriptedUpstream() as upstream,
        Gateway(store, [upstream.base_url]) as gateway,
    ):
        yield Shared(store, server.url, gateway, upstream)
