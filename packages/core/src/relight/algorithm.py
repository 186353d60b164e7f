"""The algorithm protocol: what a trainer implements so :meth:`relight.Trainer.fit` can drive it.

An algorithm owns the policy. It tells the gateway where the policy is served (an in-process
:class:`relight.engine.Engine`, or the base URLs of OpenAI-compatible servers such as vLLM, one per
replica), turns a batch of :class:`relight.Transition` into new weights, and saves or
restores itself. ``Trainer.fit`` does the rest::

    publish resources (model, policy version, algorithm.resources())
    loop:  enqueue rollouts → wait → build transitions →
           gateway paused (new calls wait, in-flight calls finish) → await algorithm.update(transitions)

Because the gateway is paused for the whole of :meth:`Algorithm.update`, an update may swap the
served weights in place; the next call is served by the new policy, and every LLM span records the
:attr:`Algorithm.policy_version` it was served under.

An algorithm that can be updated while its policy serves calls (relight-torch's
``GRPO(live_updates=True)``, whose engine swaps the weights between two generation steps) says so
with a true ``live_updates`` attribute; asynchronous training (``Trainer(max_staleness=k)``, see
:mod:`relight.training.async_loop`) then updates it without pausing the gateway. Any other is paused for.

An algorithm that trains several policies, one per role (``Trainer(policies=...)``, see
:mod:`relight.policies`), has two more members, outside the protocol because one-policy algorithms need
neither:

- ``set_policies(policies: Mapping[str, relight.Policy]) -> None``, called once before
  :meth:`Algorithm.upstreams` (and before a checkpoint is loaded): from then on its upstreams serve
  each policy under the policy's name as the request's ``model`` (the gateway puts it there), and the
  request's model name as given (:attr:`Algorithm.model`) is the base model. ``Trainer(policies=...)``
  raises a TypeError for an algorithm without it.
- ``policy_versions: Mapping[str, int]``, each policy's version (+1 after each update that changed that
  policy's weights); :attr:`Algorithm.policy_version` stays one int that changes whenever any of them
  does (their sum). :meth:`Algorithm.update` gets every policy's transitions (each names its
  ``policy``) and returns metrics per policy under ``"<metric>/<policy>"`` keys (``"loss/writer"``,
  ``"reward/writer"``, ``"policy_version/writer"``), which the run folder, trackers and dashboard show
  per policy.

Any algorithm may also say how it is set up, for the run folder's ``run.json`` (and so ``relight compare``):

- ``settings: Mapping[str, JsonValue]``, the choices that make its runs differ (``{"lr": 1e-3, "clip": 0.2}``);
  read through :func:`algorithm_settings`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from pydantic import JsonValue

from relight.engine import Engine
from relight.policies import Policy
from relight.records import Transition

__all__ = ["Algorithm", "UpstreamTarget", "algorithm_settings", "policy_setter", "policy_versions"]

UpstreamTarget = Engine | str
"""Where the policy is served: an in-process engine, or an OpenAI-compatible base URL (``http://host:8000/v1``)."""


@runtime_checkable
class Algorithm(Protocol):
    """A trainable policy and the rule that improves it from transitions.

    ``relight-torch`` and ``relight-verl`` implement it; any object with these members is one.
    """

    @property
    def model(self) -> str:
        """The model name agents put in their requests; ``llm.model`` carries it to the agent."""
        ...

    @property
    def policy_version(self) -> int:
        """The version of the weights being served now: 0 before the first update, +1 after each."""
        ...

    def upstreams(self) -> Sequence[UpstreamTarget]:
        """The replicas serving the policy. The gateway keeps each rollout on one of them (prefix cache).

        May take minutes (starting the servers): the trainer calls it on a worker thread.
        """
        ...

    def resources(self) -> Mapping[str, JsonValue]:
        """Extra resources to publish with each policy version (prompt templates, …); ``{}`` if none."""
        ...

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        """Learn from one batch, make the new weights the served ones, and return metrics to log.

        Called with the gateway paused, so no call is in flight. Transitions of one task share a
        ``group_id`` (GRPO groups). Must advance :attr:`policy_version` when the weights change.
        """
        ...

    def save(self, directory: Path) -> None:
        """Write a checkpoint (weights, optimizer, policy version) under ``directory``; called on a worker thread."""
        ...

    def load(self, directory: Path) -> None:
        """Restore the state :meth:`save` wrote, so training resumes where it stopped."""
        ...


def policy_versions(algorithm: object) -> Mapping[str, int] | None:
    """Each policy's version, for an algorithm that trains several (its ``policy_versions``); None otherwise."""
    versions = getattr(algorithm, "policy_versions", None)
    if not isinstance(versions, Mapping):
        return None
    return {str(name): int(version) for name, version in cast(Mapping[object, int], versions).items()}


def policy_setter(algorithm: object) -> Callable[[dict[str, Policy]], object]:
    """The algorithm's ``set_policies``. Raises TypeError naming the algorithm when it has none."""
    setter = getattr(algorithm, "set_policies", None)
    if not callable(setter):
        raise TypeError(
            f"{type(algorithm).__name__} cannot train several policies: it has no set_policies(policies) method. "
            "Train one policy (leave policies out, or use a role filter: TransitionBuilder(roles=...)), or use an "
            "algorithm that trains one per role"
        )
    return cast(Callable[[dict[str, Policy]], object], setter)


def algorithm_settings(algorithm: object) -> dict[str, JsonValue]:
    """The algorithm's own settings (its ``settings``), for run.json; ``{}`` for one that states none."""
    settings = getattr(algorithm, "settings", None)
    if not isinstance(settings, Mapping):
        return {}
    return {str(name): value for name, value in cast(Mapping[object, JsonValue], settings).items()}
