"""Shared setup for the examples' tests: the scenarios' (and coding and judge samples') folders on ``sys.path``, and
one dev-mode runner.

The examples are scripts whose files import their siblings (``from calc_data import load``), as
they do when run from the command line; their file names are unique across examples, so one
process can hold them all.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from relight import semconv
from relight.agent import Agent
from relight.integrity import verify_store
from relight.records import Span, SpanKind, Transition
from relight.scripted import Script, ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.training.dev_report import DevResult
from relight.training.trainer import Trainer
from relight.transitions.builder import RoleFilter, TransitionBuilder
from relight_testing.models import smollm2_path  # noqa: F401  (the fixture the training tests use)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
for folder in (
    "scenarios/calc_agent",
    "scenarios/sql_agent",
    "scenarios/rag_agent",
    "scenarios/math_crew",
    "frameworks/coding_agent",
    "frameworks/judge_agent",
):
    if str(EXAMPLES / folder) not in sys.path:
        sys.path.insert(0, str(EXAMPLES / folder))


@dataclass
class DevRun:
    """What one dev-mode pass of an example left in the store."""

    results: list[DevResult]
    spans: list[Span]
    transitions: list[Transition]

    @property
    def rewards(self) -> list[float | None]:
        return [result.reward for result in self.results]

    def roles(self, kind: SpanKind) -> list[str]:
        return [str(span.attributes.get(semconv.ROLE)) for span in self.spans if span.kind is kind]

    def tools(self) -> list[tuple[str, str, bool]]:
        """(tool name, calling role, success) of every tool span."""
        return [
            (
                str(span.attributes[semconv.GEN_AI_TOOL_NAME]),
                str(span.attributes.get(semconv.ROLE)),
                span.attributes.get(semconv.TOOL_SUCCESS) is True,
            )
            for span in self.spans
            if span.kind is SpanKind.TOOL
        ]


async def dev_run(agent: Agent, tasks: Sequence[Any], script: Script, *, roles: RoleFilter = None) -> DevRun:
    """Run each task once against ``script`` through the gateway; the transitions go through ``roles``."""
    store = InMemoryStore()
    async with ScriptedUpstream(script) as upstream:
        trainer = Trainer(store=store, max_attempts=1, console=Console(file=io.StringIO()))
        results = await trainer.adev(
            agent, list(tasks), base_url=upstream.base_url, model=upstream.model, api_key="unused", vllm=True
        )
    spans: list[Span] = []
    for result in results:
        spans += await store.query_spans(result.rollout.rollout_id)
    transitions = await TransitionBuilder(roles=roles).from_store(store, [r.rollout for r in results])
    report = await verify_store(store)
    assert report.clean, report.as_json()
    return DevRun(results, spans, transitions)


@pytest.fixture
def dev() -> Callable[..., Awaitable[DevRun]]:
    """:func:`dev_run`: an example's agent, tasks and script in; what the store kept out."""
    return dev_run
