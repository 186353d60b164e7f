"""Dev mode: each task run once against any OpenAI-compatible endpoint, to check the wiring before training.

``Trainer().dev(agent, tasks, base_url=..., model=...)`` runs on the services of a run
(:mod:`relight.training.services`: store, gateway, runners) with dev mode's own settings: each task is
one validation rollout tried once (dev rollouts are never trained and never retried), a call that sets
no output cap gets :data:`DEV_MAX_TOKENS`, and a rollout may run :data:`DEV_TIMEOUT` seconds. A row is
printed as each rollout ends and a table once all have (:mod:`relight.training.dev_report`); the
rollouts stay in the store the table names, so ``relight show ROLLOUT --store URL`` reads any of them.

Interrupted (Ctrl-C), dev mode stops the rollouts still running at once, says how many ended and where
they are kept, and :meth:`relight.Trainer.dev` exits with status 130 without a traceback.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TypedDict

from pydantic import JsonValue

from relight.agent import Agent
from relight.algorithm import Algorithm, UpstreamTarget
from relight.errors import ConfigError
from relight.gateway import OpenAIUpstream, Upstream
from relight.records import DEV_MODE, Mode, RolloutRequest
from relight.training.dev_report import DevResult, dev_result, dev_row, dev_table
from relight.training.fit import store_name, tell_policies
from relight.training.options import GatewayOptions, TrainerOptions
from relight.training.run_folder import default_run_dir
from relight.training.search import SearchAlgorithm, publish_changed
from relight.training.services import RunnerSettings, ServiceSettings, run_services

__all__ = ["DEV_MAX_TOKENS", "DEV_TIMEOUT", "DevOptions", "DevRun", "dev_store_url"]

DEV_MAX_TOKENS = 1024
"""Dev mode's output cap for a call whose request sets none (``Trainer.dev(max_tokens=...)`` changes it)."""
DEV_TIMEOUT = 300.0
"""Seconds a dev rollout may run (``Trainer.dev(timeout=...)`` or ``Trainer(timeout=...)`` changes it)."""


class DevOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`relight.Trainer.dev` (and ``adev``): where the agent's calls go."""

    base_url: str | None
    """An OpenAI-compatible endpoint (``https://api.openai.com/v1``, a local vLLM); by default the
    trainer's algorithm serves its policy."""
    model: str | None
    """The model name the agent is told to use; by default the algorithm's."""
    api_key: str | None
    """For ``base_url``; ``OPENAI_API_KEY`` by default."""
    vllm: bool | None
    """Ask the endpoint for vLLM's token ids: by default the gateway finds out whether it takes them (see
    :class:`relight.gateway.OpenAIUpstream`); False never asks."""
    max_tokens: int | None
    """The output cap of a call whose request sets none (many frameworks send none, and a small model may
    never stop): :data:`DEV_MAX_TOKENS` unless given; None leaves it to the endpoint."""
    timeout: float | None
    """Seconds a rollout may run before it fails with a timeout (``Trainer(timeout=...)`` when set wins):
    :data:`DEV_TIMEOUT` unless given; None waits for ever."""


class DevRun:
    """One :meth:`relight.Trainer.dev`: each task once, a row as each rollout ends, a table at the end."""

    def __init__(self, options: TrainerOptions, algorithm: Algorithm | SearchAlgorithm | None, dev: DevOptions) -> None:
        self.options = options
        self.algorithm = algorithm
        self.dev = dev

    async def run(self, agent: Agent, dataset: Sequence[JsonValue]) -> list[DevResult]:
        """Run each task of ``dataset`` once and print what happened; returns each task's result, in order."""
        console = self.options.console
        settings = await self._settings()
        store = store_name(settings.store)
        console.print(f"relight dev: {len(dataset)} task(s); rollouts kept in {store}", highlight=False)
        results: list[DevResult] = []
        async with run_services(agent, settings) as services:
            fixed = await publish_changed(services.store, self.options.resources) if self.options.resources else None
            version = fixed.version if fixed is not None else None
            requests = [
                RolloutRequest(
                    input=task, mode=Mode.VAL, max_attempts=1, resources_version=version, metadata={DEV_MODE: True}
                )
                for task in dataset
            ]
            rollouts = await services.store.enqueue(requests)
            try:
                async for finished in services.as_finished(rollouts):
                    await services.gateway.flush()
                    results.append(await dev_result(services.store, finished))
                    console.print(dev_row(results[-1]))
            except asyncio.CancelledError:
                running = len(rollouts) - len(results)
                stopped = f"; the {running} still running are stopped" if running else ""
                console.print(
                    f"relight dev: interrupted; {len(results)} of {len(rollouts)} rollout(s) ended{stopped} "
                    f"(dev mode tries each task once and retries nothing); rollouts kept in {store}",
                    highlight=False,
                )
                raise
        order = {rollout.rollout_id: index for index, rollout in enumerate(rollouts)}
        results.sort(key=lambda result: order[result.rollout.rollout_id])
        console.print(dev_table(results, store=store))
        return results

    async def _settings(self) -> ServiceSettings:
        """The services of a dev run: its endpoint (or the algorithm's policy), its cap, its timeout."""
        options, algorithm, dev = self.options, self.algorithm, self.dev
        base_url = dev.get("base_url")
        upstreams: Sequence[UpstreamTarget | Upstream]
        if base_url is not None:
            key = dev.get("api_key") or os.environ.get("OPENAI_API_KEY")
            upstreams = [OpenAIUpstream(base_url, vllm=dev.get("vllm"), api_key=key)]
        elif algorithm is not None:
            tell_policies(options, algorithm)
            upstreams = await asyncio.to_thread(algorithm.upstreams)
        else:
            raise ConfigError("dev() needs base_url=<an OpenAI-compatible endpoint> or a Trainer with an algorithm")
        model = dev.get("model") or (algorithm.model if algorithm is not None else None)
        if not model:
            raise ConfigError("dev() needs model=<the model name to call>")
        timeout = options.timeout if options.timeout is not None else dev.get("timeout", DEV_TIMEOUT)
        gateway: GatewayOptions = {"default_max_tokens": dev.get("max_tokens", DEV_MAX_TOKENS), **options.gateway}
        return ServiceSettings(
            store=options.store if options.store is not None else dev_store_url(),
            upstreams=upstreams,
            model=model,
            # A search algorithm trains no weights: its calls carry no policy version.
            policy_version=None
            if algorithm is None or isinstance(algorithm, SearchAlgorithm)
            else algorithm.policy_version,
            # The algorithm's upstreams serve its policies; another endpoint knows none of them.
            policies=options.transitions.policies if base_url is None else None,
            gateway=gateway,
            # Interrupted, the rollouts still running are stopped at once: none of them is tried again.
            runners=RunnerSettings.of(options, timeout=timeout, stop_grace_seconds=0.0),
        )


def dev_store_url() -> str:
    """A SQLite store in a new ``runs/dev-<date>-<time>/`` folder, so a dev run's rollouts outlive it."""
    folder = default_run_dir()
    folder = folder.with_name(f"dev-{folder.name}")
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(folder / 'store.db').resolve()}"
