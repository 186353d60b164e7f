"""The trainer: runs an agent's rollouts through the gateway and, given an algorithm, trains on them.

``Trainer().dev(agent, tasks, base_url=..., model=...)`` checks the wiring against any
OpenAI-compatible endpoint: it runs each task once and prints a table of rewards, calls and errors
(:mod:`relight.training.dev`).

``Trainer(algorithm=...).fit(agent, train, val)`` trains, step by step or with bounded staleness, and
leaves a run folder that a killed run resumes from (:mod:`relight.training.fit`). An algorithm that
improves the agent's prompts instead of its weights (relight-apo's ``APO``) is a
:class:`relight.training.search.SearchAlgorithm`, run on the same services by
:mod:`relight.training.search_fit`.

A trainer is its settings (:class:`~relight.training.options.TrainerOptions`, whose fields are its
keyword arguments) and its algorithm; each ``fit`` and ``dev`` starts the store, gateway and runners
it needs (:mod:`relight.training.services`) and stops them when it ends. ``fit`` and ``dev`` run on
relight's own event loop; ``afit`` and ``adev`` are the same on the running one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Unpack

from pydantic import JsonValue

from relight._internal import event_loop
from relight.agent import Agent
from relight.algorithm import Algorithm, policy_setter
from relight.errors import ConfigError
from relight.training.dev import DevOptions, DevRun
from relight.training.dev_report import DevResult
from relight.training.fit import FitRun
from relight.training.options import TrainerOptions
from relight.training.search import SearchAlgorithm
from relight.training.search_fit import SearchFitRun

__all__ = ["Trainer"]


@dataclass(frozen=True, eq=False)
class Trainer(TrainerOptions):
    """Runs rollouts of an agent and trains its policy with ``algorithm``.

    ``Trainer(algorithm, batch_size=8, n_samples=4, ...)``: the algorithm, then any setting of
    :class:`~relight.training.options.TrainerOptions` by keyword (the store, runners, batch and group
    sizes, validation, policies, checkpoints, staleness, the run folder, trackers, group rewards), each
    checked when the trainer is made.

    Args:
        algorithm: what serves and trains the policy (or, a search algorithm, what improves the agent's
            prompts); only :meth:`fit` needs one.
    """

    algorithm: Algorithm | SearchAlgorithm | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.algorithm is not None and self.transitions.policies is not None:
            policy_setter(self.algorithm)  # an algorithm that cannot train several policies is refused now

    def fit(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """Train the algorithm's policy on the agent's rollouts; returns each step's metrics.

        Validation runs on ``val_dataset`` before the first update (``val_before_fit``), every
        ``val_every`` steps and at the end. ``dashboard=True`` serves ``relight dashboard`` of the run's
        store while it trains and prints its URL.
        """
        return event_loop.run(self.afit(agent, train_dataset, val_dataset, dashboard=dashboard))

    async def afit(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue] | None = None,
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """:meth:`fit` on the running event loop."""
        algorithm = self.algorithm
        if algorithm is None:
            raise ConfigError("fit() needs a Trainer(algorithm=...): relight-torch or relight-verl provide one")
        if not train_dataset:
            raise ConfigError("train_dataset is empty; fit() needs at least one task")
        if isinstance(algorithm, SearchAlgorithm):
            return await SearchFitRun(self, algorithm).run(agent, train_dataset, val_dataset or [], dashboard=dashboard)
        return await FitRun(self, algorithm).run(agent, train_dataset, val_dataset, dashboard=dashboard)

    def dev(self, agent: Agent, dataset: Sequence[JsonValue], **options: Unpack[DevOptions]) -> list[DevResult]:
        """Run each task once against ``base_url`` (or the algorithm's policy) and print what happened.

        A row is printed as each rollout ends, and a table once all have; the rollouts stay in the store
        the table names (``Trainer(store=...)``, else a SQLite file in a ``runs/dev-<date>-<time>/``
        folder), so an interrupted run keeps the ones that ended and ``relight show ROLLOUT --store URL``
        reads any of them. Ctrl-C stops the rollouts still running, says so once, and exits with status
        130 (no traceback). The keyword arguments (``base_url``, ``model``, ``api_key``, ``vllm``,
        ``max_tokens``, ``timeout``) are :class:`~relight.training.dev.DevOptions`'.
        """
        try:
            return event_loop.run(self.adev(agent, dataset, **options))
        except KeyboardInterrupt:
            raise SystemExit(130) from None  # what was kept is already said; a traceback would bury it

    async def adev(self, agent: Agent, dataset: Sequence[JsonValue], **options: Unpack[DevOptions]) -> list[DevResult]:
        """:meth:`dev` on the running event loop (interrupted, it raises the cancellation on)."""
        return await DevRun(self, self.algorithm, options).run(agent, dataset)
