"""An algorithm for tests and benchmarks of the training loop: it learns nothing, so the loop is what they see."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import JsonValue

from relight.algorithm import UpstreamTarget
from relight.records import Transition
from relight.scripted import ScriptedUpstream

__all__ = ["RecordingAlgorithm"]


class RecordingAlgorithm:
    """A real :class:`relight.algorithm.Algorithm` that keeps each batch it is given and bumps the policy version.

    The policy is a :class:`~relight.scripted.server.ScriptedUpstream`. A checkpoint holds the policy
    version alone. The calls the protocol says may block (``upstreams``, ``save``) fail if the trainer
    makes them on its event loop, which they would stall.
    """

    def __init__(self, upstream: ScriptedUpstream, *, resources: Mapping[str, JsonValue] | None = None) -> None:
        self.upstream = upstream
        self.batches: list[list[Transition]] = []
        """Every batch :meth:`update` was given, in order."""
        self._resources = dict(resources or {})
        self._version = 0

    @property
    def model(self) -> str:
        return self.upstream.model

    @property
    def policy_version(self) -> int:
        return self._version

    def upstreams(self) -> Sequence[UpstreamTarget]:
        _off_the_event_loop("upstreams")
        return [self.upstream.base_url]

    def resources(self) -> Mapping[str, JsonValue]:
        return self._resources

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        self.batches.append(list(transitions))
        self._version += 1
        return {"loss": 0.0}

    def save(self, directory: Path) -> None:
        _off_the_event_loop("save")
        directory.mkdir(parents=True)
        (directory / "version").write_text(str(self._version))

    def load(self, directory: Path) -> None:
        self._version = int((directory / "version").read_text())


def _off_the_event_loop(call: str) -> None:
    """Calls that may block for minutes (relight-verl starts its cluster in upstreams()) must not stall the loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise AssertionError(f"algorithm.{call}() was called on the event loop, which it would block")
