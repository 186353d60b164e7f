"""``Trainer(policies=...)``: the algorithm learns the policies before it serves, the run publishes them,
and a fit reports metrics per policy. Real runner, gateway, openai client and scripted server."""

import io
from pathlib import Path

import pytest
from rich.console import Console

import relight
from relight import Trainer
from relight.errors import ConfigError
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder
from relight.transitions.run_config import POLICY_VERSIONS_ITEM, TRANSITIONS_ITEM
from relight_testing.algorithms import PoliciesRecordingAlgorithm, RecordingAlgorithm

POLICIES = {"writer": "write|rewrite", "checker": relight.Policy(["check_query"])}


async def test_an_algorithm_without_set_policies_is_refused_naming_it() -> None:
    async with ScriptedUpstream() as upstream:
        with pytest.raises(TypeError, match="RecordingAlgorithm cannot train several policies: it has no set_policies"):
            Trainer(RecordingAlgorithm(upstream), policies=POLICIES)


def test_policies_and_a_role_filter_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"role filter .*roles='write'.* are given together"):
        Trainer(policies=POLICIES, transitions=TransitionBuilder(roles="write"))
    with pytest.raises(ConfigError, match="policies are given twice"):
        Trainer(policies=POLICIES, transitions=TransitionBuilder(policies=POLICIES))
    with pytest.raises(ConfigError, match=r"policies\['checker'\] must be a regular expression"):
        Trainer(policies={"checker": 7})  # type: ignore[dict-item]


def test_policies_given_to_the_builder_are_the_trainers() -> None:
    trainer = Trainer(transitions=TransitionBuilder(policies=POLICIES, credit="discounted", gamma=0.5))
    assert trainer.policies is not None
    assert list(trainer.policies) == ["writer", "checker"]


async def test_the_algorithm_learns_the_policies_before_it_serves_and_the_run_publishes_them(tmp_path: Path) -> None:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = PoliciesRecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=store,
            policies=POLICIES,
            batch_size=1,
            n_samples=1,
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(_one_call, [{"text": "a"}])
    assert algorithm.calls[:2] == ["set_policies", "upstreams"]
    assert algorithm.policies == {"writer": relight.Policy("write|rewrite"), "checker": relight.Policy(["check_query"])}
    items = (await store.get_resources()).items
    assert items[TRANSITIONS_ITEM] == {
        "roles": None,
        "include_failed": False,
        "policies": {
            "writer": {"roles": "write|rewrite", "frozen": False},
            "checker": {"roles": {"exact": ["check_query"]}, "frozen": False},
        },
    }
    assert items[POLICY_VERSIONS_ITEM] == {"writer": 1, "checker": 0}  # the checker had no call to learn from
    ((transition,),) = algorithm.batches
    assert (transition.role, transition.policy) == ("write_query", "writer")


@relight.rollout
def _one_call(task: dict[str, str], llm: relight.LLM) -> float:
    import openai

    from relight.tracing.roles import end_role_span, start_role_span

    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        span = start_role_span("write_query", framework="test")
        answer = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
        if span is not None:
            end_role_span(span, response_id=answer.id)
    return 1.0
