"""What a trainer needs of runners that live outside its process: start them on a store, stop them.

:class:`relight.runners.ray_actors.RayRunners` is one; ``Trainer(runners=...)`` takes any.
"""

from __future__ import annotations

from typing import Protocol, Unpack

from relight.agent import Agent
from relight.runners.runner import RunnerOptions

__all__ = ["RemoteRunners"]


class RemoteRunners(Protocol):
    """Runners beyond this process that a trainer starts on its store and gateway, and stops at the end."""

    def start(self, agent: Agent, store_url: str, **options: Unpack[RunnerOptions]) -> None:
        """Start runners of ``agent`` on the store at ``store_url``, each made with ``options``."""
        ...

    def stop(self) -> object:
        """Let running attempts finish, then end the runners (blocking)."""
        ...
