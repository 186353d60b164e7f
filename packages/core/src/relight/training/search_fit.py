"""One ``Trainer.fit`` of a search algorithm (relight-apo's ``APO``): training's services, the algorithm's own loop.

A search changes no weights, so there is no training loop, checkpoint of weights or policy version
here: the run folder, store, gateway, runners, trackers and dashboard are set up as for training
(:mod:`relight.training.fit`, :mod:`relight.training.services`) and the algorithm drives them through a
:class:`relight.training.search.SearchRun`. A killed search resumes from the state it checkpointed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import JsonValue

from relight.agent import Agent
from relight.records import Rollout, RolloutRequest
from relight.rewards.group import GroupRewards
from relight.training.fit import dashboard_beside, open_run, store_name, wait_for_batch
from relight.training.options import TrainerOptions
from relight.training.progress import RunProgress
from relight.training.search import SearchAlgorithm, SearchRun, restore_search
from relight.training.services import RunnerSettings, ServiceSettings, run_services
from relight.transitions.run_config import TRANSITIONS_ITEM, describe

__all__ = ["SearchFitRun"]


class SearchFitRun:
    """One :meth:`relight.Trainer.fit` of a :class:`~relight.training.search.SearchAlgorithm` with ``options``."""

    def __init__(self, options: TrainerOptions, algorithm: SearchAlgorithm) -> None:
        self.options = options
        self.algorithm = algorithm
        self.progress = RunProgress(options.console, every=options.progress_every)

    async def run(
        self,
        agent: Agent,
        train_dataset: Sequence[JsonValue],
        val_dataset: Sequence[JsonValue],
        *,
        dashboard: bool = False,
    ) -> list[dict[str, float]]:
        """Run the algorithm's search; returns the metrics of each of its steps."""
        options, algorithm = self.options, self.algorithm
        run, store, record = open_run(options, agent, algorithm, train_dataset, self.progress, max_staleness=None)
        restored = restore_search(run) if record.resumed else None
        if record.resumed:
            self.progress.note(
                f"relight: resuming the search in {run.path} from step {restored.step if restored else 0}"
            )
        ended, summary = "failed", dict[str, JsonValue]()
        try:
            upstreams = await asyncio.to_thread(algorithm.upstreams)
            settings = ServiceSettings(
                store=store,
                upstreams=upstreams,
                model=algorithm.model,
                policy_version=None,  # no weights are trained: calls carry no policy version
                policies=None,
                gateway=options.gateway,
                runners=RunnerSettings.of(options, timeout=options.timeout),
            )
            async with (
                run_services(agent, settings) as services,
                dashboard_beside(options, services.store, upstreams, dashboard),
            ):

                async def run_batch(requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
                    return await wait_for_batch(services, self.progress, requests, label)

                search = SearchRun(
                    store=services.store,
                    run_batch=run_batch,
                    flush=services.gateway.flush,
                    folder=run,
                    run_id=record.run_id,
                    progress=self.progress,
                    base_items={
                        "model": algorithm.model,
                        TRANSITIONS_ITEM: describe(options.transitions),
                        **(options.resources or {}),
                    },
                    rewards=GroupRewards(options.group_rewards),
                    restored=restored,
                    max_attempts=options.max_attempts,
                )
                summary = dict(await algorithm.search(search, train_dataset, val_dataset))
            ended = "finished"
        finally:
            run.write_summary({**summary, "status": ended, "store": store_name(store)})
            self.progress.note(f"relight: search {ended}; metrics, summary and reward curve in {run.path}")
        return [
            {key: float(value) for key, value in row.items() if key not in ("kind", "time")}
            for row in run.rows
            if row["kind"] == "train"
        ]
