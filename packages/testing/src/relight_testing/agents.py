"""Agents for tests and benchmarks of the loop, importable by name so runner processes can load them.

They drive the real ``openai`` client through the gateway. A task is a mapping: ``{"text": str}``,
plus ``"stream": true`` to stream every call, ``"fail": true`` to raise after the first call, and
``"hang_first_attempt": true`` to block forever (until the process is killed) in a first attempt,
``"hang": true`` to block forever after the first call in every attempt, and ``"die": "first"`` or
``"die": "always"`` to SIGKILL its own process after the first call (runner processes only!).
Against :func:`relight.scripted.server.echo`, each call's reply is its prompt's last user message,
so the n-th reply of a task is ``"<text> #<n>"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import threading
from collections.abc import Mapping
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from relight.agent import LLM, rollout
from relight.resources.reading import resource
from relight.tracing.context import current_attempt

__all__ = [
    "CALLS",
    "DEFAULT_SYSTEM_PROMPT",
    "INSTRUMENTED_REWARD",
    "ROLE_CALLS",
    "SPANS",
    "calls_by_role",
    "instrumented",
    "many_spans_async",
    "prompted",
    "prompted_async",
    "three_calls",
    "three_calls_async",
]

CALLS = 3

_TLS = ssl.create_default_context()
"""Made once: a client that builds its own loads the CA store, ~50 ms per rollout."""


def _question(task: Mapping[str, Any], step: int) -> ChatCompletionMessageParam:
    return {"role": "user", "content": f"{task['text']} #{step}"}


def _reward(task: Mapping[str, Any], last_reply: str) -> float:
    return 1.0 if last_reply == f"{task['text']} #{CALLS - 1}" else 0.0


@rollout
def three_calls(task: Mapping[str, Any], llm: LLM) -> float:
    """Three chat calls in one growing conversation, on a thread with the sync client."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Repeat the last message."}]
    reply = ""
    http = httpx.Client(verify=_TLS)
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0, http_client=http) as client:
        for step in range(CALLS):
            messages.append(_question(task, step))
            if task.get("stream"):
                chunks = client.chat.completions.create(model=llm.model, messages=messages, stream=True)
                reply = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
            else:
                completion = client.chat.completions.create(model=llm.model, messages=messages)
                reply = completion.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            if task.get("fail"):
                raise RuntimeError(f"the agent gave up on {task['text']!r}")
            attempt = current_attempt()
            first = attempt is not None and attempt.attempt_id.endswith("-a1")
            if task.get("hang") or (task.get("hang_first_attempt") and first):
                threading.Event().wait()
            if task.get("die") == "always" or (task.get("die") == "first" and first):
                os.kill(os.getpid(), signal.SIGKILL)
    return _reward(task, reply)


@rollout
async def three_calls_async(task: Mapping[str, Any], llm: LLM) -> float:
    """:func:`three_calls` as a coroutine with the async client."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Repeat the last message."}]
    reply = ""
    http = httpx.AsyncClient(verify=_TLS)
    async with openai.AsyncOpenAI(
        base_url=llm.base_url, api_key=llm.api_key, max_retries=0, http_client=http
    ) as client:
        for step in range(CALLS):
            messages.append(_question(task, step))
            if task.get("stream"):
                chunks = await client.chat.completions.create(model=llm.model, messages=messages, stream=True)
                reply = "".join([chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices])
            else:
                completion = await client.chat.completions.create(model=llm.model, messages=messages)
                reply = completion.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            if task.get("fail"):
                raise RuntimeError(f"the agent gave up on {task['text']!r}")
    return _reward(task, reply)


SPANS = 20


@rollout
async def many_spans_async(task: Mapping[str, Any], llm: LLM) -> float:
    """``SPANS`` spans and no LLM call: ``SPANS - 1`` tool spans, then the returned reward's span.

    For load tests of the store and the runners, where the LLM would only add its own cost.
    """
    from relight.tracing import otel as tracing

    for step in range(SPANS - 1):
        with tracing.tracer().start_as_current_span(f"tool {step}", attributes={"relight.step": step}):
            pass
        if step % 5 == 0:
            await asyncio.sleep(0)  # let the loop breathe, as an agent awaiting its tools would
    return 1.0


ROLE_CALLS = (("writer", "write_query"), ("checker", "check_query"), ("planner", "plan"), ("unnamed", None))
"""(label, role) of each call :func:`calls_by_role` makes: the role named with ``relight.role``, or none."""


@rollout
def calls_by_role(task: Mapping[str, Any], llm: LLM) -> float:
    """One call per :data:`ROLE_CALLS` entry, each in a ``relight.role`` block but the last, on a thread.

    Against a script that answers with the model it was asked for, the replies say which policy served
    each call; the answers' own ``model`` names are written to the task's annotation so a test in
    another process can read them. ``"stream": true`` streams every call.
    """
    from relight.tracing.otel import emit_annotation
    from relight.tracing.request_role import role

    replies: dict[str, Any] = {}
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for label, name in ROLE_CALLS:
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": f"{task['text']} {label}"}]
            with role(name) if name is not None else contextlib.nullcontext():
                if task.get("stream"):
                    chunks = list(client.chat.completions.create(model=llm.model, messages=messages, stream=True))
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                    models = sorted({c.model for c in chunks})
                else:
                    completion = client.chat.completions.create(model=llm.model, messages=messages)
                    text, models = completion.choices[0].message.content or "", [completion.model]
            replies[label] = {"text": text, "models": models}
    emit_annotation({"replies": replies})
    return 1.0


INSTRUMENTED_REWARD = 0.75
"""The reward :func:`instrumented` returns or emits."""


@rollout
async def instrumented(task: Mapping[str, Any], llm: LLM) -> float | None:
    """An app with its own OpenTelemetry span, an adapter's role hook around one LLM call, and a reward.

    ``task["fault"]`` names a place of relight's instrumentation to break first
    (:func:`relight_testing.faults.break_instrumentation`, in this process, for good); the reward
    (:data:`INSTRUMENTED_REWARD`) is emitted with ``relight.emit_reward`` after that when
    ``task["reward"] == "emitted"``, else returned.
    """
    from opentelemetry import trace

    from relight.tracing import agent_spans
    from relight.tracing.instrumentation import guarded
    from relight.tracing.otel import emit_reward
    from relight_testing.faults import break_instrumentation

    if task.get("fault"):
        break_instrumentation(str(task["fault"]))
    opened: list[Any] = []
    on_start = guarded(lambda: opened.append(agent_spans.start_role_span("writer", framework="test")))
    on_end = guarded(lambda response_id: agent_spans.end_role_span(opened[0], response_id=response_id))
    with trace.get_tracer("relight-testing-app").start_as_current_span("plan"):  # the app's own tracer
        async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
            on_start()
            completion = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": str(task.get("text", "hi"))}]
            )
            on_end(completion.id)
    if task.get("reward") == "emitted":
        emit_reward(INSTRUMENTED_REWARD)
        return None
    return INSTRUMENTED_REWARD


DEFAULT_SYSTEM_PROMPT = "Answer the question."
"""The system prompt :func:`prompted` and :func:`prompted_async` use when no ``system_prompt`` is published."""


def _prompted_messages(task: Mapping[str, Any], system: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": system}, {"role": "user", "content": str(task["question"])}]


@rollout
def prompted(task: Mapping[str, Any], llm: LLM) -> float:
    """One call whose system prompt is the published resource ``system_prompt`` (``llm.resources``), on a thread.

    A task is ``{"question": str, "answer": str}``; the reward is 1.0 when the reply is the answer.
    """
    system = str(llm.resources.get("system_prompt", DEFAULT_SYSTEM_PROMPT))
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        completion = client.chat.completions.create(model=llm.model, messages=_prompted_messages(task, system))
    return 1.0 if (completion.choices[0].message.content or "").strip() == task["answer"] else 0.0


@rollout
async def prompted_async(task: Mapping[str, Any], llm: LLM) -> float:
    """:func:`prompted` as a coroutine that reads its prompt where a framework builds it: ``relight.resource``."""
    system = resource("system_prompt", default=DEFAULT_SYSTEM_PROMPT)
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        completion = await client.chat.completions.create(model=llm.model, messages=_prompted_messages(task, system))
    return 1.0 if (completion.choices[0].message.content or "").strip() == task["answer"] else 0.0
