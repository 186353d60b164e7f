"""Several policies, one per role: each call reaches the gateway naming its role and is served by its role's
policy. Real runner (in this process and in a runner process), gateway, openai client and a scripted
upstream that answers with the model name it was asked for."""

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

import relight
from relight import Trainer, semconv
from relight.gateway import Gateway
from relight.records import SpanKind
from relight.scripted import ScriptedUpstream, ScriptRequest
from relight.stores.memory import InMemoryStore
from relight.tracing.request_role import role_of_baggage, with_role
from relight.transitions.builder import TransitionBuilder
from relight.transitions.verdicts import Reason
from relight_testing.agents import ROLE_CALLS, calls_by_role
from relight_testing.algorithms import PoliciesRecordingAlgorithm

POLICIES = {"writer": "write|rewrite", "checker": relight.Policy(["check_query"])}
BASE = "base-model"


def asked_model(request: ScriptRequest) -> str:
    """The reply is the model name the upstream was asked for: which policy served the call."""
    return request.model


async def _dev_run(tmp_path: Path, task: dict[str, Any], **options: Any) -> tuple[InMemoryStore, Any]:
    store = InMemoryStore()
    async with ScriptedUpstream(asked_model, model=BASE) as upstream:
        trainer = Trainer(
            PoliciesRecordingAlgorithm(upstream),
            store=store,
            policies=POLICIES,
            console=Console(file=io.StringIO()),
            **options,
        )
        (result,) = await trainer.adev(calls_by_role, [task])
    return store, result


@pytest.mark.parametrize("stream", [False, True])
async def test_each_role_reaches_its_policy_and_the_answer_names_the_model_asked_for(
    tmp_path: Path, stream: bool
) -> None:
    store, result = await _dev_run(tmp_path, {"text": "q", "stream": stream})
    spans = await store.query_spans(result.rollout.rollout_id)
    (annotation,) = [s for s in spans if s.kind is SpanKind.ANNOTATION]
    replies = json.loads(str(annotation.attributes[semconv.ANNOTATION]))["replies"]
    assert {label: reply["text"] for label, reply in replies.items()} == {
        "writer": "writer",
        "checker": "checker",
        "planner": BASE,  # a role no policy names: the base model
        "unnamed": BASE,  # no role known when it arrived: the base model, marked
    }
    assert {label: reply["models"] for label, reply in replies.items()} == {label: [BASE] for label, _ in ROLE_CALLS}
    calls = sorted((s for s in spans if s.kind is SpanKind.LLM), key=lambda s: s.start_time)
    assert [s.attributes.get(semconv.ROLE) for s in calls] == [name for _, name in ROLE_CALLS]
    assert [s.attributes.get(semconv.POLICY) for s in calls] == ["writer", "checker", None, None]
    assert [s.attributes.get(semconv.POLICY_UNROUTED) for s in calls] == [None, None, None, True]
    assert {s.attributes[semconv.GEN_AI_REQUEST_MODEL] for s in calls} == {BASE}
    verdict = await TransitionBuilder(policies=POLICIES).explain(store, result.rollout, training=False)
    assert [(c.policy, c.reason) for c in verdict.calls] == [
        ("writer", None),
        ("checker", None),
        (None, Reason.NO_POLICY),
        (None, Reason.NO_POLICY),
    ]


async def test_calls_of_an_agent_in_a_runner_process_name_their_roles_too(tmp_path: Path) -> None:
    store, result = await _dev_run(tmp_path, {"text": "q"}, runner_process=True)
    calls = sorted(
        (s for s in await store.query_spans(result.rollout.rollout_id) if s.kind is SpanKind.LLM),
        key=lambda s: s.start_time,
    )
    assert [s.attributes.get(semconv.POLICY) for s in calls] == ["writer", "checker", None, None]
    assert [s.attributes.get(semconv.GEN_AI_RESPONSE_MODEL) for s in calls] == [BASE] * 4


async def test_the_gateway_routes_by_the_baggage_role_and_marks_a_call_that_names_none() -> None:
    store = InMemoryStore()
    async with (
        ScriptedUpstream(asked_model, model=BASE) as upstream,
        Gateway(store, [upstream.base_url], policies=POLICIES, model=BASE) as gateway,
    ):
        (rollout,) = await store.enqueue([relight.RolloutRequest(input="q")])
        claimed = await store.claim("w")
        assert claimed is not None
        _, attempt = claimed
        url = gateway.base_url_for(rollout.rollout_id, attempt.attempt_id) + "/chat/completions"
        body = {"model": BASE, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient() as client:
            routed = await client.post(url, json=body, headers={"baggage": with_role("x=1", "write_query")})
            unrouted = await client.post(url, json=body)
            other_model = await client.post(url, json={**body, "model": "other"}, headers={"baggage": "relight.role=w"})
        await gateway.flush()
    assert routed.json()["choices"][0]["message"]["content"] == "writer"
    assert routed.json()["model"] == BASE
    assert unrouted.json()["choices"][0]["message"]["content"] == BASE
    assert other_model.json()["choices"][0]["message"]["content"] == "other"  # not the run's model: untouched
    spans = sorted(await store.query_spans(rollout.rollout_id), key=lambda s: s.start_time)
    assert [s.attributes.get(semconv.POLICY_UNROUTED) for s in spans] == [None, True, None]
    assert semconv.POLICY not in spans[2].attributes


async def test_a_role_two_policies_name_is_refused_in_the_apis_own_shape() -> None:
    store = InMemoryStore()
    async with (
        ScriptedUpstream(asked_model, model=BASE) as upstream,
        Gateway(store, [upstream.base_url], policies={"a": "write", "b": "query"}, model=BASE) as gateway,
    ):
        (rollout,) = await store.enqueue([relight.RolloutRequest(input="q")])
        claimed = await store.claim("w")
        assert claimed is not None
        url = gateway.base_url_for(rollout.rollout_id, claimed[1].attempt_id) + "/chat/completions"
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                url,
                json={"model": BASE, "messages": [{"role": "user", "content": "hi"}]},
                headers={"baggage": "relight.role=write_query"},
            )
    assert answer.status_code == 400
    assert (
        "role 'write_query' is named by policies 'a' ('write') and 'b' ('query')" in answer.json()["error"]["message"]
    )


def test_the_role_travels_as_a_w3c_baggage_member() -> None:
    assert with_role(None, "team/writer 1") == "relight.role=team%2Fwriter%201"
    assert with_role("a=1, relight.role=old", "new") == "a=1,relight.role=new"
    assert role_of_baggage("a=1,relight.role=team%2Fwriter%201;prop=x") == "team/writer 1"
    assert role_of_baggage("a=1") is None
    assert role_of_baggage(None) is None
