"""An algorithm for tests and benchmarks of the training loop: it learns nothing, so the loop is what they see."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import JsonValue

from relight.algorithm import UpstreamTarget
from relight.policies import Policy
from relight.records import Transition
from relight.scripted import ScriptedUpstream

__all__ = ["PoliciesRecordingAlgorithm", "RecordingAlgorithm"]


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


class PoliciesRecordingAlgorithm(RecordingAlgorithm):
    """:class:`RecordingAlgorithm` training several policies, one per role: what ``Trainer(policies=...)`` needs.

    It keeps the policies it was given (:attr:`policies`, and :attr:`calls` records that
    ``set_policies`` came before ``upstreams``); each update bumps the version of every policy that
    has a transition in the batch (not frozen) and reports its metrics per policy
    (``loss/<policy>``, ``reward/<policy>``, ``policy_version/<policy>``).
    """

    def __init__(self, upstream: ScriptedUpstream, *, resources: Mapping[str, JsonValue] | None = None) -> None:
        super().__init__(upstream, resources=resources)
        self.policies: dict[str, Policy] = {}
        self.calls: list[str] = []
        self._versions: dict[str, int] = {}

    def set_policies(self, policies: Mapping[str, Policy]) -> None:
        self.calls.append("set_policies")
        self.policies = dict(policies)
        self._versions = dict.fromkeys(policies, 0)

    def upstreams(self) -> Sequence[UpstreamTarget]:
        self.calls.append("upstreams")
        return super().upstreams()

    @property
    def policy_versions(self) -> Mapping[str, int]:
        return dict(self._versions)

    @property
    def policy_version(self) -> int:
        """The sum of the policies' versions: it changes whenever one of them does."""
        return sum(self._versions.values())

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        self.batches.append(list(transitions))
        metrics: dict[str, float] = {}
        for name in self._versions:
            own = [t for t in transitions if t.policy == name]
            if own and not self.policies[name].frozen:
                self._versions[name] += 1
                metrics[f"loss/{name}"] = 0.0
                metrics[f"reward/{name}"] = sum(t.reward for t in own) / len(own)
            metrics[f"policy_version/{name}"] = self._versions[name]
        return metrics

    def save(self, directory: Path) -> None:
        super().save(directory)
        (directory / "versions").write_text(",".join(f"{k}={v}" for k, v in self._versions.items()))

    def load(self, directory: Path) -> None:
        pairs = (item.split("=") for item in (directory / "versions").read_text().split(",") if item)
        self._versions = {name: int(version) for name, version in pairs}


def _off_the_event_loop(call: str) -> None:
    """Calls that may block for minutes (relight-verl starts its cluster in upstreams()) must not stall the loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise AssertionError(f"algorithm.{call}() was called on the event loop, which it would block")
