"""A store filled by a real short training run, for the dashboard's API and browser tests.

relight-torch's tiny model (built on the spot, no downloads) is trained with GRPO through the
whole of relight on a two-role agent written with the ``openai`` client: a ``solver`` that may call
a calculator and a ``critic`` that comments, with role spans as an adapter records them. The run
trains the solver only, retries a task that fails its first attempt, fails a task every time and
validates before, between and after its steps, so every kind of verdict is in the store. Its reward
is graded so that no two samples of a task earn the same: every group carries signal, its calls are
trained, and every update changes the weights.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from openai import AsyncOpenAI
from pydantic import JsonValue
from rich.console import Console

import relight
from relight.tracing.agent_spans import end_role_span, end_tool_span, start_role_span, start_tool_span
from relight.transitions.builder import TransitionBuilder
from relight_torch.algorithms.grpo import GRPO
from relight_torch.demo.calculator import TOOLS, answer_reward, calculate
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine

GATES: dict[str, threading.Event] = {}
"""Tasks naming a gate wait for it before their first call: a test holds a live run at a known point."""


async def _call(client: AsyncOpenAI, llm: relight.LLM, role: str, messages: list[Any], **options: Any) -> Any:
    span = start_role_span(role, framework="plain", input_messages=messages)
    reply = await client.chat.completions.create(
        model=llm.model, messages=messages, max_tokens=12, temperature=1.0, **options
    )
    if span is not None:
        end_role_span(span, response_id=reply.id)
    return reply.choices[0].message


@relight.rollout
async def two_roles(task: dict[str, Any], llm: relight.LLM) -> float:
    """A solver that may use the calculator, then a critic; then fails if the task says so."""
    if "gate" in task:
        await asyncio.to_thread(GATES[task["gate"]].wait)
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": task["question"]}]
        message = await _call(client, llm, "solver", messages, tools=TOOLS)
        for tool_call in message.tool_calls or []:
            tool = start_tool_span("calculator", role="solver", framework="plain", call_id=tool_call.id)
            result = calculate(str(tool_call.function.arguments))
            if tool is not None:
                end_tool_span(tool, success=not result.startswith("error"))
        answer = message.content or ""
        await _call(client, llm, "critic", [{"role": "user", "content": f"Is {answer!r} right?"}])
    attempt = relight.current_attempt()
    first_try = attempt is not None and attempt.attempt_id.endswith("-a1")
    if task.get("fail") == "always" or (task.get("fail") == "first" and first_try):
        raise RuntimeError(f"task {task['question']!r} fails on purpose, after its calls")
    # Graded by the answer's text and by the sample's place among the task's attempts, so no two samples of a
    # task earn the same: groups carry signal, updates change the weights and the policy version rises
    # (equal rewards would skip the group, whatever sampling happened to write).
    return answer_reward(answer, task["answer"]) + zlib.crc32(answer.encode()) % 5 / 8 + _nth(task) % 8 / 64


_ATTEMPTS_SEEN: dict[str, itertools.count[int]] = {}


def _nth(task: dict[str, Any]) -> int:
    """How many attempts of this task ended before this one (in this process): each sample's own number.

    A group's attempts (2 samples, 2 attempts each) get numbers fewer than 8 apart, so they differ modulo 8,
    and the term they make (under 1/8, in 64ths) never makes up for a difference in the text term (in
    eighths): two samples of a task never tie."""
    return next(_ATTEMPTS_SEEN.setdefault(task["question"], itertools.count()))


def tasks(count: int, start: int = 0, **extra: JsonValue) -> list[JsonValue]:
    return [
        {"question": f"What is {a} * {a + 3}?", "answer": a * (a + 3), **extra} for a in range(start, start + count)
    ]


TRAIN: list[JsonValue] = [
    *tasks(1, 41),
    *tasks(1, 42, fail="first"),
    *tasks(1, 43, fail="always"),
    *tasks(3, 50),
]
VAL: list[JsonValue] = tasks(2, 70)
BATCH_SIZE, SAMPLES = 3, 2


@dataclass(frozen=True)
class TrainedRun:
    url: str
    """The store's URL (a SQLite file)."""
    history: list[dict[str, float]]
    builder: TransitionBuilder
    engine: TorchEngine
    samples: int = SAMPLES


def train(
    store: str,
    *,
    train_tasks: Sequence[JsonValue] = TRAIN,
    val: Sequence[JsonValue] = VAL,
    console: Console | None = None,
    dashboard: bool = False,
) -> tuple[list[dict[str, float]], TransitionBuilder, TorchEngine]:
    engine = tiny_engine(seed=0)
    builder = TransitionBuilder(roles="solver")
    trainer = relight.Trainer(
        GRPO(engine, lr=1e-3),
        store=store,
        batch_size=BATCH_SIZE,
        n_samples=SAMPLES,
        concurrency=6,
        val_every=1,
        max_attempts=2,
        lease_seconds=600,  # a loaded machine can stall heartbeats: the retried task's first try must fail, not expire
        transitions=builder,
        console=console or Console(file=io.StringIO()),
    )
    return trainer.fit(two_roles, list(train_tasks), list(val), dashboard=dashboard), builder, engine


@pytest.fixture(scope="session")
def training() -> SimpleNamespace:
    """:func:`train`, :func:`tasks` and :data:`GATES`, for tests that run a training of their own.

    A conftest module has no import name, so its helpers travel as a fixture.
    """
    return SimpleNamespace(train=train, tasks=tasks, gates=GATES)


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrainedRun]:
    path: Path = tmp_path_factory.mktemp("trained") / "store.db"
    url = f"sqlite:///{path}"
    history, builder, engine = train(url)
    yield TrainedRun(url, history, builder, engine)
    engine.close()
