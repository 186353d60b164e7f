"""The trainer: runs an agent's rollouts through the gateway and, given an algorithm, trains on them.

``Trainer().dev(agent, tasks, base_url=..., model=...)`` checks the wiring against any
OpenAI-compatible endpoint: it runs each task once and prints a table of rewards, calls and errors.
``Trainer(algorithm=...).fit(agent, train, val)`` trains (see :meth:`Trainer.fit`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from pydantic import JsonValue
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from relight import semconv
from relight.agent import Agent
from relight.algorithm import Algorithm, UpstreamTarget
from relight.errors import ConfigError
from relight.gateway import Gateway, OpenAIUpstream, Retokenizer, Upstream
from relight.models import Mode, Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.plugins import open_store
from relight.runner import Runner
from relight.store import Store

__all__ = ["DevResult", "Trainer"]


@dataclass(frozen=True, slots=True)
class DevResult:
    """How one task went in :meth:`Trainer.dev`."""

    rollout: Rollout
    reward: float | None
    """The sum of the rewards its last attempt recorded; None when it recorded none."""
    calls: int
    """LLM calls its last attempt made through the gateway."""
    failed_calls: int


@dataclass(frozen=True, slots=True)
class _Loop:
    store: Store
    gateway: Gateway
    runner: Runner


class Trainer:
    """Runs rollouts of an agent and trains its policy with ``algorithm``.

    Args:
        algorithm: what serves and trains the policy; only :meth:`fit` needs one.
        store: a store, or a URL for :func:`relight.open_store`; ``memory://`` by default.
        concurrency: rollouts running at once.
        max_attempts: tries per rollout before it fails.
        timeout: seconds one attempt may run; None for no limit.
        retokenizer: makes token ids when an upstream returns none (see :mod:`relight.gateway.retokenize`).
        gateway_host, gateway_port: where the gateway listens (loopback and a free port by default).
        console: where tables and progress go.
    """

    def __init__(
        self,
        algorithm: Algorithm | None = None,
        *,
        store: Store | str = "memory://",
        concurrency: int = 16,
        max_attempts: int = 3,
        timeout: float | None = None,
        retokenizer: Retokenizer | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
        console: Console | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.store = store
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.retokenizer = retokenizer
        self.gateway_host = gateway_host
        self.gateway_port = gateway_port
        self.console = console or Console()

    # -- dev --------------------------------------------------------------------------------------

    def dev(
        self,
        agent: Agent,
        dataset: Sequence[JsonValue],
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        vllm: bool = False,
    ) -> list[DevResult]:
        """Run each task once against ``base_url`` (or the algorithm's policy) and print what happened."""
        return asyncio.run(self.adev(agent, dataset, base_url=base_url, model=model, api_key=api_key, vllm=vllm))

    async def adev(
        self,
        agent: Agent,
        dataset: Sequence[JsonValue],
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        vllm: bool = False,
    ) -> list[DevResult]:
        """:meth:`dev` on the running event loop.

        Args:
            base_url: an OpenAI-compatible endpoint (``https://api.openai.com/v1``, a local vLLM).
            model: the model name the agent is told to use.
            api_key: for ``base_url``; ``OPENAI_API_KEY`` by default.
            vllm: ask the endpoint for vLLM's token ids (leave off for hosted APIs, which refuse it).
        """
        upstreams: Sequence[UpstreamTarget | Upstream]
        if base_url is not None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            upstreams = [OpenAIUpstream(base_url, vllm=vllm, api_key=key)]
        elif self.algorithm is not None:
            upstreams = self.algorithm.upstreams()
        else:
            raise ConfigError("dev() needs base_url=<an OpenAI-compatible endpoint> or a Trainer with an algorithm")
        model = model or (self.algorithm.model if self.algorithm is not None else None)
        if not model:
            raise ConfigError("dev() needs model=<the model name to call>")
        async with self._loop(agent, upstreams, model) as loop:
            requests = [RolloutRequest(input=task, mode=Mode.VAL, max_attempts=self.max_attempts) for task in dataset]
            rollouts = await self._run_batch(loop, requests, "dev")
            await loop.gateway.flush()
            results = [await _dev_result(loop.store, rollout) for rollout in rollouts]
        self.console.print(_dev_table(results))
        return results

    # -- shared machinery -------------------------------------------------------------------------

    @asynccontextmanager
    async def _loop(
        self, agent: Agent, upstreams: Sequence[UpstreamTarget | Upstream], model: str
    ) -> AsyncGenerator[_Loop]:
        """A store, a gateway in front of ``upstreams`` and a runner working on them, for the block's duration."""
        store = open_store(self.store) if isinstance(self.store, str) else self.store
        try:
            async with Gateway(
                store,
                upstreams,
                retokenizer=self.retokenizer,
                policy_version=self.algorithm.policy_version if self.algorithm is not None else None,
                host=self.gateway_host,
                port=self.gateway_port,
            ) as gateway:
                runner = Runner(
                    agent,
                    store,
                    gateway_url=gateway.url,
                    model=model,
                    concurrency=self.concurrency,
                    timeout=self.timeout,
                )
                running = asyncio.create_task(runner.run())
                try:
                    yield _Loop(store, gateway, runner)
                finally:
                    runner.stop()
                    await running
        finally:
            if isinstance(self.store, str):
                await store.close()

    async def _run_batch(self, loop: _Loop, requests: Sequence[RolloutRequest], label: str) -> list[Rollout]:
        """Enqueue rollouts and wait for all of them, showing progress."""
        rollouts = await loop.store.enqueue(requests)
        ids = [rollout.rollout_id for rollout in rollouts]
        columns = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            bar = progress.add_task(label, total=len(ids))
            while True:
                rollouts = await loop.store.wait(ids, timeout=0.5)
                progress.update(bar, completed=sum(rollout.is_finished for rollout in rollouts))
                if all(rollout.is_finished for rollout in rollouts):
                    return rollouts


async def _dev_result(store: Store, rollout: Rollout) -> DevResult:
    attempts = await store.list_attempts(rollout.rollout_id)
    spans: list[Span] = await store.query_spans(rollout.rollout_id, attempts[-1].attempt_id) if attempts else []
    rewards = [
        float(value)
        for span in spans
        if span.kind is SpanKind.REWARD and isinstance(value := span.attributes.get(semconv.REWARD), int | float)
    ]
    calls = [span for span in spans if span.kind is SpanKind.LLM]
    return DevResult(
        rollout=rollout,
        reward=sum(rewards) if rewards else None,
        calls=len(calls),
        failed_calls=sum(span.status_code == "ERROR" for span in calls),
    )


def _dev_table(results: Sequence[DevResult]) -> Table:
    table = Table(title="relight dev", title_justify="left")
    for column in ("rollout", "task", "status", "attempts", "reward", "calls", "errors"):
        table.add_column(column, justify="right" if column in ("attempts", "reward", "calls") else "left")
    for result in results:
        rollout = result.rollout
        task = str(rollout.input)
        errors = [f"{result.failed_calls} failed call(s)"] if result.failed_calls else []
        if rollout.error:
            errors.append(rollout.error.strip().splitlines()[-1])
        style = "green" if rollout.status is RolloutStatus.SUCCEEDED else "red"
        table.add_row(
            rollout.rollout_id,
            task if len(task) <= 40 else task[:39] + "…",
            f"[{style}]{rollout.status.value}[/]",
            str(rollout.attempt_count),
            "—" if result.reward is None else f"{result.reward:.3f}",
            str(result.calls),
            "; ".join(errors),
        )
    return table
