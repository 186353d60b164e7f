"""The services a run starts: a store, a gateway in front of the policy, and runners working on both.

``fit`` and ``dev`` run their rollouts on the same services, each set up from one typed
:class:`ServiceSettings` (fit's from the trainer's options and its algorithm; dev mode's with the
endpoint it was given, its own output cap and timeout). The runners are of one of three kinds:

* one :class:`relight.Runner` in this process (the default): nothing to pickle, one process to debug;
* :class:`~relight.runners.processes.RunnerProcesses` on this machine (``n_runners > 1`` or
  ``runner_process``), watched by a :class:`~relight.runners.supervisor.RunnerSupervisor` that restarts
  those that die;
* remote runners given to the trainer (``runners=RayRunners(8)``).

Runners in other processes reach a store that lives in this process through an HTTP store server
started here on loopback; a store that is already an HTTP store is shared by its own URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from relight._internal.server import AsgiServer
from relight.agent import Agent
from relight.algorithm import UpstreamTarget
from relight.gateway import Gateway, Upstream
from relight.plugins import open_store
from relight.policies import Policy
from relight.records import Rollout
from relight.runners.processes import RunnerProcesses
from relight.runners.remote import RemoteRunners
from relight.runners.runner import Runner, RunnerOptions
from relight.runners.supervisor import RunnerSupervisor
from relight.store import Store
from relight.training.options import GatewayOptions, TrainerOptions

__all__ = ["RunServices", "RunnerSettings", "ServiceSettings", "run_services"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerSettings:
    """How many runners of which kind, and how each runs an attempt (see :class:`relight.Runner`)."""

    concurrency: int
    timeout: float | None
    """Seconds one attempt may run; None for no limit."""
    lease_seconds: float
    heartbeat_seconds: float | None
    n_runners: int = 1
    runner_process: bool = False
    remote: RemoteRunners | None = None
    """Runners beyond this machine, which the services start and stop instead of their own."""
    max_restarts: int = 3
    """Restarts, in all, of runner processes that die."""
    stop_grace_seconds: float | None = None
    """How long a stopping runner lets its running attempts finish; None: :class:`relight.Runner`'s default."""

    @classmethod
    def of(
        cls, options: TrainerOptions, *, timeout: float | None, stop_grace_seconds: float | None = None
    ) -> RunnerSettings:
        """The trainer's runners, with ``timeout`` as each attempt's limit."""
        return cls(
            concurrency=options.concurrency,
            timeout=timeout,
            lease_seconds=options.lease_seconds,
            heartbeat_seconds=options.heartbeat_seconds,
            n_runners=options.n_runners,
            runner_process=options.runner_process,
            remote=options.runners,
            max_restarts=options.max_runner_restarts,
            stop_grace_seconds=stop_grace_seconds,
        )

    def options(self, gateway_url: str, model: str) -> RunnerOptions:
        """Each runner's keyword arguments: the gateway it sends calls to and the model name agents use."""
        options = RunnerOptions(
            gateway_url=gateway_url,
            model=model,
            concurrency=self.concurrency,
            timeout=self.timeout,
            lease_seconds=self.lease_seconds,
            heartbeat_seconds=self.heartbeat_seconds,
        )
        if self.stop_grace_seconds is not None:
            options["stop_grace_seconds"] = self.stop_grace_seconds
        return options


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSettings:
    """Everything a run's store, gateway and runners are set up with."""

    store: Store | str
    """A store, or a URL of one, which the services open and close."""
    upstreams: Sequence[UpstreamTarget | Upstream]
    """What serves the policy: the algorithm's engines or servers, or dev mode's endpoint."""
    model: str
    """The model name agents are told to use."""
    policy_version: int | None
    """The version the gateway stamps on calls until the run publishes another; None when no weights train."""
    policies: Mapping[str, Policy] | None
    """The run's policies, each call served by its role's; None serves every call as asked (a run of one
    policy, or an endpoint that knows none of them)."""
    gateway: GatewayOptions
    """How the gateway listens and retokenizes, and the output cap of a call that sets none."""
    runners: RunnerSettings


@dataclass(frozen=True, slots=True)
class RunServices:
    """A run's store, its gateway, and the supervisor of its runner processes (None without processes)."""

    store: Store
    gateway: Gateway
    supervisor: RunnerSupervisor | None = None

    def runners_health(self) -> str | None:
        """Raise if every runner process has died for good; else their health line (None without processes)."""
        if self.supervisor is None:
            return None
        self.supervisor.check()
        return self.supervisor.health()

    async def as_finished(self, rollouts: Sequence[Rollout]) -> AsyncGenerator[Rollout]:
        """Each of ``rollouts`` as it ends (read again from the store), in the order they end."""
        pending = {rollout.rollout_id for rollout in rollouts}
        while pending:
            for rollout in await self.store.wait(sorted(pending), timeout=0.5):
                if rollout.is_finished and rollout.rollout_id in pending:
                    pending.discard(rollout.rollout_id)
                    yield rollout
            self.runners_health()


@asynccontextmanager
async def run_services(agent: Agent, settings: ServiceSettings) -> AsyncGenerator[RunServices]:
    """A store, a gateway in front of the settings' upstreams and runners of ``agent``, for the block's duration."""
    store = open_store(settings.store) if isinstance(settings.store, str) else settings.store
    try:
        async with (
            Gateway(
                store,
                settings.upstreams,
                policy_version=settings.policy_version,
                policies=settings.policies,
                model=settings.model,
                **settings.gateway,
            ) as gateway,
            _runners(agent, store, settings, gateway) as services,
        ):
            yield services
    finally:
        if isinstance(settings.store, str):
            await store.close()


@asynccontextmanager
async def _runners(
    agent: Agent, store: Store, settings: ServiceSettings, gateway: Gateway
) -> AsyncGenerator[RunServices]:
    """The runners of the settings' kind at work on ``store`` and ``gateway`` for the block's duration."""
    runners = settings.runners
    options = runners.options(gateway.url, settings.model)
    if runners.remote is not None:
        async with _shared(store, settings.store) as shared_url:
            await asyncio.to_thread(runners.remote.start, agent, shared_url, **options)
            try:
                yield RunServices(store, gateway)
            finally:
                await asyncio.to_thread(runners.remote.stop)
    elif runners.n_runners == 1 and not runners.runner_process:
        runner = Runner(agent, store, gateway=gateway, **options)
        running = asyncio.create_task(runner.run())
        try:
            yield RunServices(store, gateway)
        finally:
            runner.stop()
            await running
    else:
        async with _shared(store, settings.store) as shared_url:
            processes = RunnerProcesses(runners.n_runners, agent, shared_url, **options)
            processes.start()
            supervisor = RunnerSupervisor(processes, store, max_restarts=runners.max_restarts)
            supervisor.start()
            try:
                yield RunServices(store, gateway, supervisor)
            finally:
                await supervisor.stop()
                await asyncio.to_thread(processes.stop)


@asynccontextmanager
async def _shared(store: Store, url: Store | str) -> AsyncGenerator[str]:
    """A URL runner processes can open ``store`` by: its own when it is an HTTP store, else served here."""
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        yield url
        return
    from relight.stores.http.server import create_app

    # Short long-polls: shutting down waits for the polls still held (the server drops those of
    # runner processes that have gone), and a second is quick either way.
    async with AsgiServer(create_app(store, max_poll_seconds=1.0)) as server:
        yield server.url
