"""Train one role of the LangGraph example with relight-torch's GRPO on the tiny model, for a few steps.

The graph runs unchanged (planner → ReAct researcher subgraph → writer) against the tiny model behind
the gateway; a role filter hands the algorithm the ``researcher/agent`` calls alone, and each step's
rollouts are served by the weights the previous step produced.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from rich.console import Console

import relight
from relight.records import Transition
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder
from relight_testing.examples import example_file, load_example

torch = pytest.importorskip("torch")
torch_trainer = pytest.importorskip("relight_torch")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")]

ROLE = "researcher/agent"


example = load_example(example_file("frameworks/langgraph/research_graph.py", near=__file__))


@relight.rollout
async def research(task: dict[str, Any], llm: relight.LLM) -> float:
    """The example's rollout with short replies, so the CPU test stays quick.

    An untrained tiny model never earns the example's reward, so a tie-breaker (shorter final
    answers score higher) makes the rollouts of one task differ and gives GRPO a gradient.
    """
    model = ChatOpenAI(base_url=llm.base_url, api_key=llm.api_key, model=llm.model, max_tokens=12)
    result = await example.build_graph(model).ainvoke({"messages": [("user", task["question"])]})
    answer = str(result["messages"][-1].content)
    return example.score(answer, task["answer"]) + 1 / (1 + len(answer))


async def test_a_role_filter_trains_the_researcher_alone_on_the_policy_it_updates() -> None:
    updates: list[Sequence[Transition]] = []

    def remember(transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        updates.append(transitions)

    engine = torch_trainer.tiny_engine(seed=0)
    before = [parameter.detach().clone() for parameter in engine.model.parameters()]
    algorithm = torch_trainer.GRPO(engine, lr=1e-3, callbacks=[remember])
    trainer = relight.Trainer(
        algorithm,
        store=InMemoryStore(),
        batch_size=2,
        n_samples=2,
        concurrency=4,
        transitions=TransitionBuilder(roles=[ROLE]),
        console=Console(file=io.StringIO()),
    )
    history = await trainer.afit(research, example.TASKS[:2] * 2)

    assert [int(step["step"]) for step in history] == [1, 2]
    assert algorithm.policy_version == 2
    assert all(step["grad_norm"] > 0 for step in history)
    assert any(not torch.equal(a, b) for a, b in zip(before, engine.model.parameters(), strict=True))
    for version, transitions in enumerate(updates):
        assert {t.role for t in transitions} == {ROLE}
        assert len({t.rollout_id for t in transitions}) == 4, "every rollout's researcher calls are trained"
        assert {t.policy_version for t in transitions} == {version}, "each step samples the previous step's policy"
