"""After each update the store says which calls were trained, into which version, with what advantage; the
dashboard's rollout page shows it. Real trainer, runner, gateway, openai client and scripted server."""

import io
import itertools
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
from rich.console import Console

from relight import Trainer
from relight.agent import LLM, rollout
from relight.dashboard.detail import rollout_detail
from relight.records import RolloutRequest, Transition
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.tracing.agent_spans import end_role_span, start_role_span
from relight.tracing.hook_failures import hook_failures
from relight.transitions.builder import TransitionBuilder
from relight.transitions.trained_calls import TRAINED_SPAN, record_trained, trained_calls
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.store import make_span


@rollout
async def writer_and_checker(task: Mapping[str, Any], llm: LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for role in ("writer", "checker"):
            span = start_role_span(role, framework="test")
            messages: Any = [{"role": "user", "content": f"{task['text']} {role}"}]
            completion = await client.chat.completions.create(model=llm.model, messages=messages)
            if span is not None:
                end_role_span(span, response_id=completion.id)
    return float(next(_draws))  # every sample its own reward: a group's advantages differ


_draws = itertools.count()


class CenteredAdvantages(RecordingAlgorithm):
    """Reports, as GRPO without the deviation would, each transition's reward less its group's mean."""

    def advantages(self, transitions: Sequence[Transition]) -> list[float]:
        groups: defaultdict[str, list[float]] = defaultdict(list)
        for transition in transitions:
            groups[transition.group_id].append(transition.reward)
        return [t.reward - statistics.fmean(groups[t.group_id]) for t in transitions]


class BrokenAdvantages(RecordingAlgorithm):
    def advantages(self, transitions: Sequence[Transition]) -> list[float]:
        raise RuntimeError("no advantages today")


TASKS = [{"text": "a"}, {"text": "b"}]


async def _train(algorithm_class: type[RecordingAlgorithm], tmp_path: Path) -> tuple[InMemoryStore, Any]:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = algorithm_class(upstream)
        trainer = Trainer(
            algorithm,
            store=store,
            batch_size=2,
            n_samples=2,
            transitions=TransitionBuilder(roles="writer"),
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(writer_and_checker, TASKS)
    return store, algorithm


async def test_the_rollout_page_shows_each_trained_calls_advantage(tmp_path: Path) -> None:
    store, algorithm = await _train(CenteredAdvantages, tmp_path)
    (batch,) = algorithm.batches
    expected = dict(zip([t.span_id for t in batch], algorithm.advantages(batch), strict=True))
    assert len(expected) == 4
    assert all(advantage != 0 for advantage in expected.values())
    shown: dict[str, Any] = {}
    for summary in (await store.list_summaries(limit=100)).rows:
        detail = await rollout_detail(store, TransitionBuilder(roles="writer"), summary.rollout.rollout_id, None)
        for call in detail["calls"]:  # type: ignore[union-attr]
            assert isinstance(call, dict)
            if call["trained"]:
                shown[call["span_id"]] = (call["advantage"], call["trained_into"])
            else:
                assert (call["role"], call["advantage"], call["trained_into"]) == ("checker", None, None)
    assert shown == {span_id: (advantage, 1) for span_id, advantage in expected.items()}


async def test_advantages_that_differ_within_a_group_are_kept_per_call(tmp_path: Path) -> None:
    store = InMemoryStore()
    (rollout,) = await store.enqueue([RolloutRequest(input="x")])
    claim = await store.claim("w")
    assert claim is not None
    await store.add_spans([make_span(rollout.rollout_id, claim[1].attempt_id, f"llm{i}") for i in range(2)])
    transitions = [
        Transition(
            rollout_id=rollout.rollout_id,
            attempt_id=claim[1].attempt_id,
            group_id="g",
            step=i,
            prompt_token_ids=[1],
            response_token_ids=[2],
            reward=float(i),
            span_id=f"llm{i}",
        )
        for i in range(2)
    ]

    class Fixed:
        def advantages(self, given: Sequence[Transition]) -> list[float]:
            return [-0.5, float("nan")]

    await record_trained(store, Fixed(), transitions, 3)
    spans = await store.query_spans(rollout.rollout_id)
    assert [span.name for span in spans].count(TRAINED_SPAN) == 1
    trained = trained_calls(spans)
    assert {k: (v.advantage, v.policy_version) for k, v in trained.items()} == {"llm0": (-0.5, 3), "llm1": (None, 3)}


async def test_an_algorithm_whose_advantages_fail_still_trains_and_records_the_calls(tmp_path: Path) -> None:
    before = hook_failures().get("the algorithm's advantages()", 0)
    store, algorithm = await _train(BrokenAdvantages, tmp_path)
    assert algorithm.policy_version == 1
    assert hook_failures()["the algorithm's advantages()"] == before + 1
    (batch,) = algorithm.batches
    for transition in batch:
        detail = await rollout_detail(store, TransitionBuilder(roles="writer"), transition.rollout_id, None)
        (call,) = [c for c in detail["calls"] if c["span_id"] == transition.span_id]  # type: ignore[union-attr]
        assert (call["advantage"], call["trained_into"]) == (None, 1)
