"""Running an agent again against exactly what the model said when a rollout was recorded.

:func:`replay` reads one attempt of a rollout from a store, serves its recorded answers from a scripted model
(:mod:`relight.replay.script`) behind a gateway of its own, and runs the agent on the rollout's task in this
process, handed the base URL, key and model name as relight always hands them (``relight.LLM``): a debugger
stops in the agent's own code; a changed tool, prompt or reward shows what it would have done to this
rollout. The spans of the replay go to a store of their own (``into``, an in-memory one by default), never
to the store the recording is read from, which is only read. The replay keeps the rollout's task, group,
mode and metadata, so the agent sees what it saw then; its id is the recorded one with ``-replay-<hex>``
after it, so that a store holds several replays of one rollout and nothing keyed by an attempt (an adapter's
state) mistakes the replay for the recorded attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from relight._internal.ids import random_hex
from relight.agent import Agent
from relight.errors import ConfigError
from relight.gateway import Gateway, OpenAIUpstream
from relight.records import Rollout, RolloutRequest, Span
from relight.replay.recording import RecordedExchange, Recording, read_recording
from relight.replay.script import Divergence, ReplayScript
from relight.replay.spans import span_differences
from relight.runners.runner import Runner
from relight.scripted.server import ScriptedUpstream
from relight.store import Store
from relight.training.search import publish_changed
from relight.transitions.builder import episode_return

__all__ = ["ReplayResult", "replay"]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """How a replay went: the rollout as it ended, its spans, and whether (and where) it left the recording."""

    recording: Recording
    rollout: Rollout
    spans: Sequence[Span]
    divergence: Divergence | None
    unanswered: Sequence[RecordedExchange]
    """Recorded calls the agent never made again (it ended, or failed, early)."""
    differences: Sequence[str]
    """How the replay's spans differ from the recording's, ids and times aside (:func:`span_differences`)."""

    @property
    def diverged(self) -> bool:
        """Whether the agent left the recording: asked something else, more, or less."""
        return self.divergence is not None or bool(self.unanswered)

    @property
    def reward_before(self) -> float | None:
        return episode_return(self.recording.spans)

    @property
    def reward_after(self) -> float | None:
        return episode_return(self.spans)


async def replay(
    source: Store,
    rollout_id: str,
    agent: Agent,
    *,
    into: Store,
    attempt_id: str | None = None,
    timeout: float | None = 300.0,
) -> ReplayResult:
    """Run ``agent`` on ``rollout_id``'s task against the recorded answers of its attempt ``attempt_id`` (its last
    by default), recording into ``into``. The agent reads the resources (prompts) the recording ran with: that
    version's items are published in ``into`` and the replay pinned to them.

    Raises:
        relight.NotFoundError: ``source`` holds no such rollout or attempt.
        relight.ConfigError: the attempt recorded no LLM call, or ``into`` is ``source``.
    """
    if into is source:
        raise ConfigError("a replay never writes into the store it replays from: give it another store")
    recording = await read_recording(source, rollout_id, attempt_id)
    replay_id = f"{rollout_id}-replay-{random_hex(6)}"
    script = ReplayScript(recording.exchanges)
    recorded = recording.rollout
    async with (
        ScriptedUpstream(script, model=recording.model) as upstream,
        Gateway(
            into, [OpenAIUpstream(upstream.base_url, vllm=True)], policy_version=recording.policy_version
        ) as gateway,
    ):
        request = RolloutRequest(
            input=recorded.input,
            mode=recorded.mode,
            group_id=recorded.group_id,
            rollout_id=replay_id,
            max_attempts=1,
            metadata=recorded.metadata,
            resources_version=await _same_resources(source, into, recorded),
        )
        await into.enqueue([request])
        runner = Runner(
            agent, into, gateway=gateway, gateway_url=gateway.url, model=recording.model, concurrency=1, timeout=timeout
        )
        running = asyncio.create_task(runner.run())
        waiting = asyncio.ensure_future(into.wait([replay_id]))
        try:
            await asyncio.wait([waiting, running], return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():  # the runner ended (it raised) before the rollout did
                running.result()
                raise ConfigError(f"the runner stopped before the replay of {rollout_id!r} ended")
            (ended,) = waiting.result()
        finally:
            waiting.cancel()
            runner.stop()
            await running
        await gateway.flush()
    spans = await into.query_spans(replay_id)
    return ReplayResult(
        recording=recording,
        rollout=ended,
        spans=spans,
        divergence=script.divergence,
        unanswered=[] if script.divergence is not None else script.unanswered,
        differences=span_differences(recording.spans, spans),
    )


async def _same_resources(source: Store, into: Store, recorded: Rollout) -> int | None:
    """The version of ``into`` holding the resources (prompts) the recorded rollout ran with, published there
    for the replay; None when the recording was pinned to none."""
    if recorded.resources_version is None:
        return None
    items = (await source.get_resources(recorded.resources_version)).items
    return (await publish_changed(into, items)).version
