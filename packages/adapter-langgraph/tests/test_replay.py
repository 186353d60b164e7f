"""Replaying a recorded LangGraph rollout (the example graph: planner, ReAct researcher with a tool, writer).

The recording is a training run's; the replay runs the same graph in this process against the recorded
answers and must leave the same spans, the adapter's role spans and tool span included, ids and times aside.
A graph whose writer was given another prompt diverges at the writer's call, the fourth.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import relight
from relight import semconv
from relight.records import Span, SpanKind
from relight.replay import replay
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.examples import example_file, load_example

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

example = load_example(example_file("frameworks/langgraph/research_graph.py", near=__file__))

IDS = {
    semconv.GEN_AI_RESPONSE_ID,
    semconv.ROLLOUT_ID,
    semconv.ATTEMPT_ID,
    semconv.UPSTREAM,
    semconv.FRAMEWORK_RUN_ID,
}


def essence(spans: list[Span]) -> list[str]:
    """The spans the attempt left, as JSON without ids and times (a parent named by its name)."""
    names = {span.span_id: span.name for span in spans}
    return sorted(
        json.dumps(
            {
                "name": s.name,
                "status": [s.status_code, s.status_message],
                "parent": names.get(s.parent_id or ""),
                "attributes": {k: v for k, v in s.attributes.items() if k not in IDS},
            },
            sort_keys=True,
        )
        for s in spans
        if not (s.kind is SpanKind.ANNOTATION and s.name.startswith("relight."))
    )


@pytest.fixture
async def recorded(tmp_path: Path) -> relight.Store:
    """A training run's store holding one rollout of the graph."""
    async with ScriptedUpstream(example.scripted_model) as upstream:
        trainer = relight.Trainer(
            RecordingAlgorithm(upstream),
            batch_size=1,
            n_samples=1,
            run_dir=tmp_path / "run",
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(example.research, [{"question": "What is 6 * 7?", "answer": 42}])
    store = relight.open_store(f"sqlite:///{tmp_path / 'run' / 'store.db'}")
    yield store
    await store.close()


async def test_a_replayed_graph_leaves_the_recorded_spans(recorded: relight.Store) -> None:
    (rollout,) = await recorded.list_rollouts()
    original = await recorded.query_spans(rollout.rollout_id)
    result = await replay(recorded, rollout.rollout_id, example.research, into=InMemoryStore())
    assert not result.diverged
    assert result.differences == []
    assert len(result.recording.exchanges) == 4  # planner, researcher twice (the tool between), writer
    assert {s.kind for s in result.spans} >= {SpanKind.LLM, SpanKind.ROLE, SpanKind.TOOL, SpanKind.REWARD}
    assert essence(list(result.spans)) == essence(original)
    assert result.reward_after == result.reward_before == 1.0
    assert await recorded.query_spans(rollout.rollout_id) == original


async def test_a_graph_with_another_writer_prompt_diverges_at_the_writers_call(
    recorded: relight.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(example, "WRITER_PROMPT", "You are the writer. Answer in one word.")
    (rollout,) = await recorded.list_rollouts()
    result = await replay(recorded, rollout.rollout_id, example.research, into=InMemoryStore())
    assert result.divergence is not None
    assert result.divergence.call == 4
    assert result.divergence.expected is not None
    assert result.divergence.expected.index == 3
    explanation = result.divergence.explain()
    assert "You are the writer. Give the final answer as 'Answer: <number>'." in explanation
    assert '+    "content": "You are the writer. Answer in one word.",' in explanation
