"""What a trainer needs of runners that live outside its process: start them on a store, stop them.

:class:`relight.runners.ray_actors.RayRunners` is one; ``Trainer(runners=...)`` takes any.
"""

from __future__ import annotations

from typing import Any, Protocol

from relight.agent import Agent

__all__ = ["RemoteRunners"]


class RemoteRunners(Protocol):
    def start(self, agent: Agent, store_url: str, **options: Any) -> None:
        """Start runners of ``agent`` on the store at ``store_url`` (``options``: :class:`relight.Runner`'s)."""
        ...

    def stop(self) -> object:
        """Let running attempts finish, then end the runners (blocking)."""
        ...
