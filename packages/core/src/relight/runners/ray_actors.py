"""Runners as actors on a Ray cluster: ``Trainer(runners=RayRunners(8, address="auto"))``.

Each actor runs one :class:`relight.Runner` against the store's and the gateway's URLs. The
agent travels by import path (``package.module:name``), so it must be installed on the nodes, as any
code Ray runs must. Ray's own fault handling keeps the actors going: an actor that dies is restarted
(``max_restarts``) and its ``run`` call re-sent (``max_task_retries``); the attempts it had under way
are not lost, since their leases expire and the store hands them to a runner again. Actors need
``num_cpus`` each (a fraction is fine: they wait on I/O) and any custom ``resources``, by which they
can be kept on CPU nodes, away from the GPUs. Install Ray with ``pip install 'relight[ray]'``
(relight-verl has it already).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Unpack
from urllib.parse import urlsplit, urlunsplit

from relight.agent import Agent, FunctionAgent, load_agent
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.records import new_id
from relight.runners.runner import Runner, RunnerOptions, RunnerStats

__all__ = ["RayRunners", "agent_path"]

_FORWARDED_ENV = ("RELIGHT_STORE_TOKEN", "RELIGHT_PLUGINS", "RELIGHT_DISABLE_PLUGIN_AUTOLOAD")
"""Variables of the driver's environment that runner actors need to see the same store and plugins."""


def agent_path(agent: Agent) -> str:
    """The import path by which a runner elsewhere loads ``agent`` (see :func:`relight.agent.load_agent`)."""
    target: Any = agent.function if isinstance(agent, FunctionAgent) else type(agent)
    module, name = target.__module__, target.__qualname__
    if module == "__main__" or "<locals>" in name:
        raise ConfigError(
            f"agent {name!r} is defined in {'a function' if '<locals>' in name else 'the main script'}; runners "
            "on other processes and hosts import it by path, so define it at the top level of an importable module"
        )
    return f"{module}:{name}"


class RunnerActor:
    """One runner in a Ray actor (Ray's async actor: ``run`` and ``stop`` share the actor's event loop)."""

    def __init__(self, agent: str, store_url: str, options: RunnerOptions) -> None:
        self._agent = load_agent(agent)
        self._store_url = store_url
        self._options = options
        self._runner: Runner | None = None

    async def run(self) -> dict[str, int]:
        """Run until :meth:`stop`; returns the runner's stats."""
        ray = _ray()
        options = RunnerOptions(**self._options)
        if "worker_id" not in options:  # which node ran an attempt shows in its worker id
            node = ray.get_runtime_context().get_node_id()[:12]
            options["worker_id"] = f"{socket.gethostname()}-{os.getpid()}-node-{node}-{new_id('w')}"
        store = open_store(self._store_url)
        try:
            self._runner = Runner(self._agent, store, **options)
            stats = await self._runner.run()
        finally:
            await store.close()
        return _as_dict(stats)

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.stop()

    async def health(self) -> dict[str, Any]:
        stats = _as_dict(self._runner.stats) if self._runner is not None else {}
        return {"pid": os.getpid(), "worker_id": self._runner.worker_id if self._runner else None, **stats}


class RayRunners:
    """``count`` runner actors on a Ray cluster, for :class:`relight.Trainer`'s ``runners``.

    Args:
        count: runner actors.
        address: the cluster to join when Ray is not yet initialised in this process (``"auto"``:
            the one ``ray start`` made on this host; None: a new local one).
        num_cpus: CPUs Ray reserves for each actor.
        resources: custom Ray resources each actor needs, e.g. ``{"cpu_node": 1}``.
        max_restarts: how often Ray restarts an actor that died (-1: always).
        agent: the agent's import path, when it is not the one given to the trainer.
    """

    def __init__(
        self,
        count: int,
        *,
        address: str | None = "auto",
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
        max_restarts: int = -1,
        agent: str | None = None,
    ) -> None:
        if count < 1:
            raise ConfigError(f"the number of runner actors must be at least 1, got {count}")
        self.count = count
        self.address = address
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.max_restarts = max_restarts
        self.agent = agent
        self.actors: list[Any] = []
        self._runs: list[Any] = []

    def start(self, agent: Agent, store_url: str, **options: Unpack[RunnerOptions]) -> None:
        """Place the actors and start their runners on ``store_url`` with :class:`Runner` ``options``."""
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address)
        node_ip = ray.util.get_node_ip_address()
        store_url = reachable(store_url, node_ip)
        options["gateway_url"] = reachable(options["gateway_url"], node_ip)
        path = self.agent or agent_path(agent)
        env = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
        actor_class = ray.remote(RunnerActor).options(
            num_cpus=self.num_cpus,
            resources=self.resources,
            max_restarts=self.max_restarts,
            max_task_retries=-1,  # a restarted actor takes up its run call again
            scheduling_strategy="SPREAD",
            runtime_env={"env_vars": env} if env else None,
        )
        for index in range(self.count):
            own = RunnerOptions(**options)
            if "worker_id" in own:
                own["worker_id"] = f"{own['worker_id']}-{index}"
            actor = actor_class.remote(path, store_url, own)
            self.actors.append(actor)
            self._runs.append(actor.run.remote())

    def health(self) -> list[dict[str, Any]]:
        """Each actor's pid, worker id and runner stats."""
        ray = _ray()
        return ray.get([actor.health.remote() for actor in self.actors])

    def stop(self, *, grace_seconds: float = 30.0) -> list[dict[str, int]]:
        """Ask each runner to finish its attempts, wait up to ``grace_seconds``, then remove the actors."""
        ray = _ray()
        try:
            ray.get([actor.stop.remote() for actor in self.actors], timeout=grace_seconds)
            ready, _ = ray.wait(self._runs, num_returns=len(self._runs), timeout=grace_seconds)
            return [ray.get(ref) for ref in ready]
        finally:
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
            self.actors.clear()
            self._runs.clear()


def _ray() -> Any:
    """Ray, imported when runners are placed (an optional dependency; its typing is loose, hence Any)."""
    try:
        import ray
    except ImportError as error:
        raise ConfigError(f"RayRunners need Ray ({error}): pip install 'relight[ray]'") from error
    return ray


def reachable(url: str, node_ip: str) -> str:
    """``url`` with a wildcard host (``0.0.0.0``) replaced by this node's address, so other nodes can reach it."""
    parts = urlsplit(url)
    if parts.hostname not in ("0.0.0.0", "::"):
        return url
    netloc = f"{node_ip}:{parts.port}" if parts.port else node_ip
    return urlunsplit(parts._replace(netloc=netloc))


def _as_dict(stats: RunnerStats) -> dict[str, int]:
    return {
        "claimed": stats.claimed,
        "succeeded": stats.succeeded,
        "failed": stats.failed,
        "timed_out": stats.timed_out,
        "lost": stats.lost,
    }
