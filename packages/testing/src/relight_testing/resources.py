"""The resources kit: an agent uses the prompt published for its rollout, and its own default when none is.

An agent built with a framework reads its prompt where the framework builds it, with
``relight.resource(name, default=...)``; this holds any such agent to what that must do, through the
whole of relight (a dev run: gateway, runner, store) against a scripted model::

    async def test_the_planner_reads_its_published_prompt():
        await check_published_prompt_is_used(
            research, TASKS[0], script=scripted_model, name="planner_prompt",
            published="You are the planner. A published version.", default=PLANNER_PROMPT,
        )

The published text must still steer the scripted model as the default does (keep the words it routes by).
"""

from __future__ import annotations

import io
import json
from typing import Any, cast

from pydantic import JsonValue
from rich.console import Console

from relight import semconv
from relight.agent import Agent
from relight.records import RolloutStatus, SpanKind
from relight.scripted import Script, ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.training.trainer import Trainer

__all__ = ["check_published_prompt_is_used", "instructions_sent"]

_OLDER = "An older version of the prompt, which no rollout is pinned to."


async def check_published_prompt_is_used(
    agent: Agent, task: JsonValue, *, script: Script, name: str, published: str, default: str
) -> None:
    """Run ``agent`` on ``task`` with ``{name: published}`` published (after an older version), then with nothing.

    The first run must be pinned to the newer version, record that it read ``name`` from it, and send the
    model ``published`` in its instructions (and never the older text); the second must record that the
    default stood in, and send ``default``.
    """
    store = InMemoryStore()
    await store.publish_resources({name: _OLDER})
    quiet = Console(file=io.StringIO())
    async with ScriptedUpstream(script) as upstream:
        options: dict[str, Any] = {"base_url": upstream.base_url, "model": "scripted", "api_key": "unused"}
        pinned = Trainer(store=store, resources={name: published}, max_attempts=1, timeout=120, console=quiet)
        (result,) = await pinned.adev(agent, [task], **options)
        plain = Trainer(store=store, max_attempts=1, timeout=120, console=quiet)
        (alone,) = await plain.adev(agent, [task], **options)
    assert result.rollout.status is RolloutStatus.SUCCEEDED, result.rollout.error
    assert result.rollout.resources_version == 1, "the rollout is pinned to the version the trainer published"
    assert result.resources.get(name) == 1, f"{name} was not recorded as read from version 1: {result.resources}"
    sent = await instructions_sent(store, result.rollout.rollout_id)
    assert any(published in text for text in sent), f"no call sent the published {name}; instructions: {sent}"
    assert not any(_OLDER in text for text in sent), "a call sent a version the rollout was not pinned to"
    assert alone.rollout.status is RolloutStatus.SUCCEEDED, alone.rollout.error
    assert alone.rollout.resources_version is None
    assert name in alone.resources, f"the read of {name} was not recorded: {alone.resources}"
    assert alone.resources[name] is None, "the default stood in, and is recorded as such"
    sent = await instructions_sent(store, alone.rollout.rollout_id)
    assert any(default in text for text in sent), f"no call sent the default {name}; instructions: {sent}"


async def instructions_sent(store: InMemoryStore, rollout_id: str) -> list[str]:
    """The system (and developer) messages of every model call the rollout made, as the gateway recorded them."""
    texts: list[str] = []
    for span in await store.query_spans(rollout_id):
        raw = span.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)
        if span.kind is not SpanKind.LLM or not isinstance(raw, str):
            continue
        for message in cast(list[dict[str, Any]], json.loads(raw)):
            if message.get("role") in ("system", "developer"):
                content = message.get("content")
                parts = cast(list[Any], content) if isinstance(content, list) else [content]
                texts.append("".join(str(p.get("text", "")) if isinstance(p, dict) else str(p or "") for p in parts))
    return texts
