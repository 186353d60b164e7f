"""Several policies, one per role: naming them, checking them, and transitions that carry the policy."""

import itertools
import re
from typing import Any

import pytest

import relight
from relight import semconv
from relight.errors import ConfigError
from relight.policies import Policies, as_policies
from relight.records import Rollout, RolloutStatus, Span, SpanKind
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder
from relight.transitions.run_config import TRANSITIONS_ITEM, builder_of_run, describe
from relight.transitions.verdicts import Reason

ROLLOUT = Rollout(rollout_id="ro-1", input="task", group_id="task-7", status=RolloutStatus.SUCCEEDED)
ATTEMPT = "ro-1-a1"
_ids = itertools.count()


def span(kind: SpanKind, start: int, end: int, **attributes: Any) -> Span:
    return Span(
        rollout_id="ro-1",
        attempt_id=ATTEMPT,
        span_id=f"s{next(_ids)}",
        trace_id="t",
        name=kind.value,
        start_time=start,
        end_time=end,
        attributes={semconv.SPAN_KIND: kind.value, **attributes},
    )


def llm(start: int, response_id: str, **attributes: Any) -> Span:
    return span(
        SpanKind.LLM,
        start,
        start + 5,
        **{
            semconv.GEN_AI_RESPONSE_ID: response_id,
            semconv.PROMPT_TOKEN_IDS: [1, 2, start],
            semconv.RESPONSE_TOKEN_IDS: [start, start + 1],
            semconv.RESPONSE_LOGPROBS: [-0.5, -0.25],
            semconv.POLICY_VERSION: 1,
            **attributes,
        },
    )


def role(start: int, name: str, response_id: str) -> Span:
    return span(SpanKind.ROLE, start, start + 6, **{semconv.ROLE: name, semconv.GEN_AI_RESPONSE_ID: response_id})


def reward(at: int, value: float) -> Span:
    return span(SpanKind.REWARD, at, at, **{semconv.REWARD: value})


POLICIES = {
    "writer": "write|rewrite",
    "checker": relight.Policy(["check_query"]),
    "judge": relight.Policy("^judge$", frozen=True),
}


def test_values_become_policies_and_roles_resolve_to_their_policy() -> None:
    policies = as_policies(POLICIES)
    assert policies["writer"] == relight.Policy("write|rewrite")
    assert policies["checker"].roles == ["check_query"]
    assert policies["judge"].frozen
    resolve = Policies(policies)
    assert [resolve.policy_of(r) for r in ("write_query", "team/rewrite", "check_query", "judge", "planner", None)] == [
        "writer",
        "writer",
        "checker",
        "judge",
        None,
        None,
    ]


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ({}, "policies is empty"),
        (["writer"], "policies must map policy names to roles"),
        ({"my writer": "write"}, "policies has the name 'my writer'"),
        ({"writer": "write("}, r"policies\['writer'\]='write\(' is not a valid regular expression"),
        ({"writer": 3}, r"policies\['writer'\] must be a regular expression, a compiled pattern or a list"),
        ({"writer": ["write", 3]}, r"policies\['writer'\] must list roles as strings; 3 is a int"),
        (
            {"a": ["write_query"], "b": "write"},
            "policies 'a' \\(\\['write_query'\\]\\) and 'b' \\('write'\\) both name 'write_query'",
        ),
        ({"a": "write", "b": re.compile("write")}, "both name every role matching 'write'"),
        ({"a": None, "b": "write"}, "both name every role"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(policies: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        as_policies(policies)


def test_a_policy_checks_its_own_fields() -> None:
    with pytest.raises(ConfigError, match=r"Policy\.roles must be a regular expression"):
        relight.Policy(roles=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Policy\.frozen must be True or False, got 'yes'"):
        relight.Policy("write", frozen="yes")  # type: ignore[arg-type]


def test_two_patterns_that_both_match_a_role_are_refused_when_the_role_is_seen() -> None:
    resolve = Policies(as_policies({"a": "write", "b": "query"}))
    with pytest.raises(
        ConfigError, match="role 'write_query' is named by policies 'a' \\('write'\\) and 'b' \\('query'\\)"
    ):
        resolve.policy_of("write_query")


def test_roles_and_policies_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="roles='write' and policies are given together"):
        TransitionBuilder(roles="write", policies={"writer": "write"})
    with pytest.raises(ConfigError, match="policies are given twice"):
        TransitionBuilder(policies={"writer": "write"}).with_policies({"writer": "write"})


def test_each_transition_names_its_policy_and_other_calls_say_why_they_are_left_out() -> None:
    spans = [
        llm(10, "r1", **{semconv.POLICY: "writer"}),
        role(9, "write_query", "r1"),
        llm(20, "r2", **{semconv.POLICY: "checker"}),
        role(19, "check_query", "r2"),
        llm(30, "r3"),
        role(29, "planner", "r3"),
        llm(40, "r4", **{semconv.POLICY: "judge"}),
        role(39, "judge", "r4"),
        llm(50, "r5", **{semconv.POLICY_UNROUTED: True}),
        role(49, "rewrite_query", "r5"),
        llm(60, "r6", **{semconv.POLICY: "checker"}),
        role(59, "write_query", "r6"),
        reward(70, 1.0),
    ]
    verdicts = TransitionBuilder(policies=POLICIES).judge(ROLLOUT, ATTEMPT, spans)
    assert [(v.role, v.policy, v.reason) for v in verdicts] == [
        ("write_query", "writer", None),
        ("check_query", "checker", None),
        ("planner", None, Reason.NO_POLICY),
        ("judge", "judge", Reason.FROZEN_POLICY),
        ("rewrite_query", "writer", Reason.OTHER_POLICY),
        ("write_query", "writer", Reason.OTHER_POLICY),
    ]
    assert [v.transition.policy for v in verdicts if v.transition is not None] == ["writer", "checker"]
    details = [v.detail for v in verdicts]
    assert "no policy names role 'planner'" in details[2]
    assert "policy 'judge' is frozen" in details[3]
    assert "could not tell the call's role when it arrived, so the base model served it" in details[4]
    assert "policy 'checker' served it, but its role 'write_query' belongs to policy 'writer'" in details[5]


def test_the_role_a_call_named_on_arrival_wins_over_the_join() -> None:
    spans = [llm(10, "r1", **{semconv.ROLE: "check_query", semconv.POLICY: "checker"}), reward(20, 1.0)]
    (transition,) = TransitionBuilder(policies=POLICIES).from_spans(ROLLOUT, ATTEMPT, spans)
    assert (transition.role, transition.policy) == ("check_query", "checker")


def test_without_policies_transitions_name_none() -> None:
    (transition,) = TransitionBuilder().from_spans(ROLLOUT, ATTEMPT, [llm(10, "r1"), reward(20, 1.0)])
    assert transition.policy is None


async def test_a_runs_policies_are_read_back_from_its_resources() -> None:
    store = InMemoryStore()
    builder = TransitionBuilder(policies=POLICIES, include_failed=True)
    await store.publish_resources({TRANSITIONS_ITEM: describe(builder)})
    again = await builder_of_run(store)
    assert again is not None
    assert again.policies == builder.policies
    assert again.include_failed
