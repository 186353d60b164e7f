"""``Trainer(policies=...)``: the algorithm learns the policies before it serves, the run publishes them,
and a fit reports metrics per policy. Real runner, gateway, openai client and scripted server."""

import asyncio
import io
import itertools
import json
from pathlib import Path

import pytest
from rich.console import Console

import relight
from relight import Trainer, semconv
from relight.cli import main
from relight.dashboard.catalog import Catalog
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.records import SpanKind
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.training.resume import RunIdentity, RunRecord
from relight.transitions.builder import TransitionBuilder, last_attempt_spans
from relight.transitions.run_config import POLICY_METRICS_ITEM, POLICY_VERSIONS_ITEM, TRANSITIONS_ITEM
from relight.transitions.trained_calls import trained_calls
from relight_testing.agents import calls_by_role
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
        "include_inexact": False,
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

    from relight.tracing.agent_spans import end_role_span, start_role_span

    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        span = start_role_span("write_query", framework="test")
        answer = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
        if span is not None:
            end_role_span(span, response_id=answer.id)
    return 1.0


@pytest.mark.parametrize("max_staleness", [None, 1])
async def test_a_fit_shows_each_policy_in_its_metrics_run_folder_dashboard_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], max_staleness: int | None
) -> None:
    """Each call routed to its role's policy; metrics, the run folder, the dashboard and ``relight show`` per policy."""
    store_path = tmp_path / "store.db"
    async with ScriptedUpstream(lambda request: request.model, model="base") as upstream:
        algorithm = PoliciesRecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=f"sqlite:///{store_path}",
            policies={**POLICIES, "planner": relight.Policy("^plan$", frozen=True)},
            batch_size=2,
            n_samples=1,
            max_staleness=max_staleness,
            run_dir=tmp_path / "run",
            console=Console(file=io.StringIO()),
        )
        (metrics,) = await trainer.afit(calls_by_role, [{"text": "a"}, {"text": "b"}])
    # The algorithm's own per-policy metrics, and what the core adds per policy.
    assert (metrics["loss/writer"], metrics["reward/writer"], metrics["transitions/writer"]) == (0.0, 1.0, 2.0)
    assert (metrics["transitions/checker"], metrics["policy_version/checker"]) == (2.0, 1.0)
    assert (metrics["transitions/planner"], metrics["calls_left_out/planner"]) == (0.0, 2.0)  # frozen
    assert [t.policy for t in algorithm.batches[0]] == ["writer", "checker"] * 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["reward/writer"] == 1.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["policy_versions"] == {
        "writer": 1,
        "checker": 1,
        "planner": 0,
    }

    store = open_store(f"sqlite:///{store_path}")
    try:
        latest = (await store.get_resources()).items
        assert latest[POLICY_METRICS_ITEM]["writer"]["transitions"] == 2.0  # type: ignore[index]
        catalog = Catalog(store)
        await catalog.refresh()
        (point,) = [p for p in catalog.curves() if p.get("policies")]
        assert point["policies"]["checker"]["policy_version"] == 0  # type: ignore[index]  # sampled before the update
        rollout = (await store.list_rollouts())[0]
        spans = await last_attempt_spans(store, rollout.rollout_id)
    finally:
        await store.close()
    served = {s.span_id: s.attributes.get(semconv.POLICY) for s in spans if s.kind is SpanKind.LLM}
    trained = trained_calls(spans)
    # Each call carries its own policy's version (1), not the run's sum of versions (2).
    assert {served[span_id]: call.policy_version for span_id, call in trained.items()} == {"writer": 1, "checker": 1}
    assert await asyncio.to_thread(main, ["show", rollout.rollout_id, "--store", f"sqlite:///{store_path}"]) == 0
    out = capsys.readouterr().out
    assert "served by policy writer" in out
    assert "served by the base model (role unknown when it arrived)" in out
    assert "policy writer trained" in out.replace("\u2502", "").replace("  ", " ")
    assert "not trained: frozen policy" in out


async def test_a_run_resumed_with_other_policies_is_refused_naming_them(tmp_path: Path) -> None:
    async with ScriptedUpstream() as upstream:
        algorithm = PoliciesRecordingAlgorithm(upstream)
        first = RunIdentity.of(
            _one_call, algorithm, batch_size=1, n_samples=1, epochs=1, max_staleness=None, tasks=[], policies=None
        )
        again = RunIdentity.of(
            _one_call,
            algorithm,
            batch_size=1,
            n_samples=1,
            epochs=1,
            max_staleness=None,
            tasks=[],
            policies={"writer": relight.Policy("write", frozen=True)},
        )
    RunRecord.open(tmp_path, first)
    with pytest.raises(
        ConfigError, match=r"policies \(None when the run started, \{'writer': \"'write' frozen\"\} now\)"
    ):
        RunRecord.open(tmp_path, again)


class SkipsFlatGroups(PoliciesRecordingAlgorithm):
    """As relight-torch's VLLMGRPO: a policy's group whose rewards are all equal is left out of its update."""

    skips_flat_groups = True


_samples = itertools.count()


@relight.rollout
def writer_then_checker(task: dict[str, str], llm: relight.LLM) -> float:
    """Plain Python naming its roles with ``relight.role`` alone; the checker's own reward is the same every time."""
    import openai

    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for role in ("write_query", "check_query"):
            with relight.role(role):
                client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
    relight.emit_reward(0.5, name="checker", role="check_query")
    return float(next(_samples) % 2)  # the writer's samples differ: its group has signal


async def test_a_group_flat_for_one_policy_is_skipped_for_that_policy_alone(tmp_path: Path) -> None:
    """One task, two samples: the writer's group has signal, the checker's (its own reward, equal) has none."""
    store = InMemoryStore()
    async with ScriptedUpstream(lambda request: request.model, model="base") as upstream:
        trainer = Trainer(
            SkipsFlatGroups(upstream),
            store=store,
            policies=POLICIES,
            batch_size=1,
            n_samples=2,
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        (metrics,) = await trainer.afit(writer_then_checker, [{"text": "a"}])
    assert (metrics["groups"], metrics["groups_no_signal"]) == (2, 1)
    assert (metrics["reward/checker"], metrics["reward_mean"]) == (0.5, 0.5), "the checker's reward is its own"
    for rollout in await store.list_rollouts():
        spans = await last_attempt_spans(store, rollout.rollout_id)
        trained = trained_calls(spans)
        roles = {str(s.attributes[semconv.ROLE]): s.span_id for s in spans if s.kind is SpanKind.LLM}
        assert roles["write_query"] in trained, "the writer's group had signal"
        assert roles["check_query"] not in trained, "the checker's group was flat"
