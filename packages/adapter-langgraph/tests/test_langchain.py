"""Plain LangChain, without LangGraph: the role is the model's run name."""

from __future__ import annotations

import io

from langchain_openai import ChatOpenAI
from rich.console import Console

import relight
from relight import semconv
from relight.records import SpanKind
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight_langgraph import LangGraphAdapter


async def test_a_chat_model_outside_a_graph_is_named_by_its_run_name() -> None:
    LangGraphAdapter().instrument()

    @relight.rollout
    async def critique(task: str, llm: relight.LLM) -> float:
        model = ChatOpenAI(base_url=llm.base_url, api_key=llm.api_key, model=llm.model)
        await model.with_config(run_name="critic").ainvoke(task)
        await model.ainvoke(task)
        return 1.0

    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        trainer = relight.Trainer(store=store, console=Console(file=io.StringIO()))
        (result,) = await trainer.adev(critique, ["Is this good?"], base_url=upstream.base_url, model=upstream.model)
    (attempt,) = await store.list_attempts(result.rollout.rollout_id)
    spans = await store.query_spans(result.rollout.rollout_id, attempt.attempt_id)
    roles = sorted((s for s in spans if s.kind is SpanKind.ROLE), key=lambda s: s.start_time)
    assert [s.attributes[semconv.ROLE] for s in roles] == ["critic", "ChatOpenAI"]
