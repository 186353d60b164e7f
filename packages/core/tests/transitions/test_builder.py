"""Transitions from spans: joining LLM and role spans, role filters, groups, failures, JSONL."""

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from relight import semconv
from relight.errors import ConfigError
from relight.records import AttemptStatus, Mode, Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.stores.memory import InMemoryStore
from relight.transitions.builder import TransitionBuilder
from relight.transitions.drops import DropReason, mark_dropped
from relight.transitions.jsonl import read_jsonl, write_jsonl
from relight.transitions.trained_calls import record_update
from relight.transitions.verdicts import Note, Reason

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


def llm(start: int, response_id: str, messages: Any = None, **attributes: Any) -> Span:
    return span(
        SpanKind.LLM,
        start,
        start + 5,
        **{
            semconv.GEN_AI_RESPONSE_ID: response_id,
            semconv.GEN_AI_INPUT_MESSAGES: json.dumps(messages or [{"role": "user", "content": response_id}]),
            semconv.PROMPT_TOKEN_IDS: [1, 2, start],
            semconv.RESPONSE_TOKEN_IDS: [start, start + 1],
            semconv.RESPONSE_LOGPROBS: [-0.5, -0.25],
            semconv.POLICY_VERSION: 3,
            semconv.RETOKENIZED: False,
            **attributes,
        },
    )


def role(start: int, end: int, name: str, **attributes: Any) -> Span:
    return span(SpanKind.ROLE, start, end, **{semconv.ROLE: name, **attributes})


def reward(at: int, value: float) -> Span:
    return span(SpanKind.REWARD, at, at, **{semconv.REWARD: value})


def test_each_call_becomes_a_transition_with_its_ids_logprobs_and_version() -> None:
    (transition,) = TransitionBuilder().from_spans(ROLLOUT, ATTEMPT, [llm(10, "r1"), reward(20, 1.0)])
    assert transition.prompt_token_ids == [1, 2, 10]
    assert transition.response_token_ids == [10, 11]
    assert transition.response_logprobs == [-0.5, -0.25]
    assert (transition.reward, transition.policy_version, transition.group_id) == (1.0, 3, "task-7")
    assert transition.metadata["response_id"] == "r1"
    assert transition.role is None


def test_roles_join_by_response_id_then_messages_then_order() -> None:
    spans = [
        llm(10, "r1"),
        llm(20, "r2", [{"role": "system", "content": "plan"}, {"role": "user", "content": "go"}]),
        llm(30, "r3"),
        llm(40, "r4"),
        # by response id, recorded out of order
        role(38, 46, "critic", **{semconv.GEN_AI_RESPONSE_ID: "r4"}),
        role(9, 16, "planner", **{semconv.GEN_AI_RESPONSE_ID: "r1"}),
        # by messages: same request, spelled with content parts, span times that do not contain the call
        role(
            0,
            1,
            "researcher/agent",
            **{
                semconv.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [
                        {"role": "system", "content": [{"type": "text", "text": "plan"}]},
                        {"role": "user", "content": "go"},
                    ]
                )
            },
        ),
        # by order: the role span around the call
        role(29, 36, "writer"),
    ]
    transitions = TransitionBuilder().from_spans(ROLLOUT, ATTEMPT, spans)
    assert [(t.step, t.role) for t in transitions] == [
        (0, "planner"),
        (1, "researcher/agent"),
        (2, "writer"),
        (3, "critic"),
    ]


def test_role_filters_keep_the_trained_roles_with_their_episode_steps() -> None:
    spans = [llm(10, "r1"), llm(20, "r2"), llm(30, "r3"), llm(40, "r4")]
    spans += [
        role(9, 16, "team/writer"),
        role(19, 26, "team/critic"),
        role(29, 36, "team/writer"),
    ]
    spans.append(reward(50, 2.0))

    def kept(**options: Any) -> list[tuple[int, str | None]]:
        return [(t.step, t.role) for t in TransitionBuilder(**options).from_spans(ROLLOUT, ATTEMPT, spans)]

    assert kept(roles="team/writer") == [(0, "team/writer"), (2, "team/writer")]
    assert kept(roles=".*/(writer|critic)") == [(0, "team/writer"), (1, "team/critic"), (2, "team/writer")]
    assert kept(roles=["team/critic"]) == [(1, "team/critic")]
    # a regular expression is searched in the role path, as Agent Lightning's agent_match
    assert kept(roles=re.compile("writer")) == [(0, "team/writer"), (2, "team/writer")]
    assert kept(roles="write|crit") == [(0, "team/writer"), (1, "team/critic"), (2, "team/writer")]
    assert kept(roles="^writer$") == []  # anchored: the whole path
    assert kept(roles=["writer"]) == []  # a list names exact role paths
    assert kept() == [(0, "team/writer"), (1, "team/critic"), (2, "team/writer"), (3, None)]
    # credit is computed over the whole episode, then filtered: call 2 of 4 discounted by 0.5 ** 1
    (_first, second) = TransitionBuilder(roles="team/writer", credit="discounted", gamma=0.5).from_spans(
        ROLLOUT, ATTEMPT, spans
    )
    assert second.reward == pytest.approx(2.0 * 0.5)


def test_a_role_filter_that_is_no_regular_expression_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"roles='write\(' is not a valid regular expression"):
        TransitionBuilder(roles="write(")


def test_groups_by_task_or_by_task_and_role() -> None:
    spans = [llm(10, "r1"), role(9, 16, "writer"), llm(20, "r2")]
    assert [t.group_id for t in TransitionBuilder(group_by_role=True).from_spans(ROLLOUT, ATTEMPT, spans)] == [
        "task-7/writer",
        "task-7",
    ]


def test_failed_and_untrainable_calls_are_left_out() -> None:
    failed = llm(20, "r2")
    failed = failed.model_copy(update={"status_code": "ERROR"})
    no_ids = llm(30, "r3")
    no_ids = no_ids.model_copy(
        update={"attributes": {k: v for k, v in no_ids.attributes.items() if k != semconv.RESPONSE_TOKEN_IDS}}
    )
    builder = TransitionBuilder()
    transitions = builder.from_spans(ROLLOUT, ATTEMPT, [llm(10, "r1"), failed, no_ids])
    assert [t.metadata["response_id"] for t in transitions] == ["r1"]
    assert builder.skipped == 1


def test_retokenized_calls_are_marked() -> None:
    (transition,) = TransitionBuilder().from_spans(
        ROLLOUT, ATTEMPT, [llm(10, "r1", **{semconv.RETOKENIZED: True, semconv.RESPONSE_LOGPROBS: None})]
    )
    assert transition.retokenized is True
    assert transition.response_logprobs is None


async def test_only_succeeded_rollouts_yield_transitions_unless_failed_ones_are_asked_for() -> None:
    store = InMemoryStore()
    await store.enqueue(
        [RolloutRequest(input="ok", rollout_id="ok"), RolloutRequest(input="bad", rollout_id="bad", max_attempts=1)]
    )
    for status in (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED):
        claimed = await store.claim("w")
        assert claimed is not None
        rollout, attempt = claimed
        spans = [llm(10, f"{rollout.rollout_id}-call")]
        await store.add_spans(
            [s.model_copy(update={"rollout_id": rollout.rollout_id, "attempt_id": attempt.attempt_id}) for s in spans]
        )
        await store.finish_attempt(
            rollout.rollout_id, attempt.attempt_id, status, error="boom" if status is AttemptStatus.FAILED else None
        )
    rollouts = await store.list_rollouts()
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED, RolloutStatus.FAILED]
    assert [t.rollout_id for t in await TransitionBuilder().from_store(store, rollouts)] == ["ok"]
    with_failed = await TransitionBuilder(include_failed=True, failed_reward=-1.0).from_store(store, rollouts)
    assert [(t.rollout_id, t.reward) for t in with_failed] == [("ok", 0.0), ("bad", -1.0)]


def test_jsonl_round_trip(tmp_path: Path) -> None:
    transitions = TransitionBuilder().from_spans(ROLLOUT, ATTEMPT, [llm(10, "r1"), llm(20, "r2"), reward(30, 1.0)])
    path = tmp_path / "transitions.jsonl"
    assert write_jsonl(transitions, path) == 2
    assert read_jsonl(path) == transitions


# -- verdicts: why each call was (not) trained, from the same code ----------------------------------


def test_each_call_gets_the_verdict_of_the_code_that_builds_transitions() -> None:
    failed = llm(30, "r3").model_copy(update={"status_code": "ERROR", "status_message": "upstream said 500"})
    no_ids = llm(40, "r4")
    no_ids = no_ids.model_copy(
        update={"attributes": {k: v for k, v in no_ids.attributes.items() if k != semconv.RESPONSE_TOKEN_IDS}}
    )
    cut = llm(50, "r5", **{semconv.RETOKENIZED: True, semconv.GEN_AI_RESPONSE_FINISH_REASONS: ["length"]})
    spans = [llm(10, "r1"), llm(20, "r2"), failed, no_ids, cut]
    spans += [role(9, 16, "writer"), role(19, 26, "critic"), role(39, 46, "writer"), role(49, 56, "writer")]
    builder = TransitionBuilder(roles="writer")

    verdicts = builder.judge(ROLLOUT, ATTEMPT, spans)

    assert [(v.span.attributes[semconv.GEN_AI_RESPONSE_ID], v.step, v.reason) for v in verdicts] == [
        ("r1", 0, None),
        ("r2", 1, Reason.FILTERED_ROLE),
        ("r3", None, Reason.FAILED_CALL),
        ("r4", 2, Reason.NO_TOKEN_IDS),
        ("r5", 3, None),
    ]
    assert verdicts[1].role == "critic"
    assert "'writer'" in verdicts[1].detail
    assert verdicts[2].detail == "upstream said 500"
    assert verdicts[4].notes == (Note.RETOKENIZED, Note.TRUNCATED)
    assert [v.transition for v in verdicts if v.transition] == builder.from_spans(ROLLOUT, ATTEMPT, spans)


async def test_a_rollout_verdict_names_what_kept_its_calls_out() -> None:
    store = InMemoryStore()
    await store.enqueue(
        [
            RolloutRequest(input="retried", rollout_id="retried"),
            RolloutRequest(input="bad", rollout_id="bad", max_attempts=1),
            RolloutRequest(input="val", rollout_id="val", mode=Mode.VAL),
        ]
    )
    for status in (AttemptStatus.FAILED, AttemptStatus.FAILED, AttemptStatus.SUCCEEDED, AttemptStatus.SUCCEEDED):
        claimed = await store.claim("w")
        assert claimed is not None
        rollout, attempt = claimed
        call = llm(10, f"{attempt.attempt_id}-call")
        await store.add_spans(
            [call.model_copy(update={"rollout_id": rollout.rollout_id, "attempt_id": attempt.attempt_id})]
        )
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, status)
    await store.enqueue([RolloutRequest(input="waiting", rollout_id="waiting")])
    builder = TransitionBuilder()

    async def reasons(rollout_id: str, **options: Any) -> tuple[Reason | None, list[Reason | None]]:
        verdict = await builder.explain(store, await store.get_rollout(rollout_id), **options)
        return verdict.reason, [call.reason for call in verdict.calls]

    # No update has used any call yet: the call that counts could be trained, and is not.
    assert await reasons("retried") == (None, [Reason.RETRIED_ATTEMPT, Reason.NOT_UPDATED])
    assert await reasons("retried", training=False) == (None, [Reason.RETRIED_ATTEMPT, None])
    assert await reasons("bad") == (Reason.FAILED_ROLLOUT, [Reason.FAILED_ROLLOUT])
    assert await reasons("val") == (Reason.VALIDATION, [Reason.VALIDATION])
    assert await reasons("val", training=False) == (None, [None])
    assert await reasons("waiting") == (Reason.NOT_FINISHED, [])
    verdict = await builder.explain(store, await store.get_rollout("retried"), training=False)
    assert verdict.attempt_id == "retried-a2"
    assert verdict.transitions == await builder.from_store(store, [verdict.rollout])
    assert verdict.summary() == "1 of 2 call(s) trained; left out: 1 retried attempt"
    failed_too = await TransitionBuilder(include_failed=True).explain(
        store, await store.get_rollout("bad"), training=False
    )
    assert (failed_too.reason, failed_too.summary()) == (None, "1 of 1 call(s) trained")


class _Versioned:
    """An algorithm as record_update sees it: a policy version, and whether it skips groups without signal."""

    def __init__(self, version: int, *, skips_flat_groups: bool = True) -> None:
        self.policy_version = version
        self.skips_flat_groups = skips_flat_groups


REWARDS = {"flat-1": 1.0, "flat-2": 1.0, "mixed-1": 0.0, "mixed-2": 1.0}
"""Two groups of two rollouts: ``flat`` without signal, ``mixed`` with."""


async def _finished_groups() -> tuple[InMemoryStore, list[Rollout]]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input=name, rollout_id=name, group_id=name[:-2]) for name in REWARDS])
    for _ in REWARDS:
        claimed = await store.claim("w")
        assert claimed is not None
        rollout, attempt = claimed
        ids = {"rollout_id": rollout.rollout_id, "attempt_id": attempt.attempt_id}
        call = llm(10, f"{rollout.rollout_id}-call").model_copy(update=ids)
        earned = reward(20, REWARDS[rollout.rollout_id]).model_copy(update=ids)
        await store.add_spans([call, earned])
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
    return store, [await store.get_rollout(name) for name in REWARDS]


async def _first_reasons(store: InMemoryStore, rollouts: list[Rollout]) -> dict[str, Reason | None]:
    builder = TransitionBuilder()
    return {r.rollout_id: (await builder.explain(store, r)).calls[0].reason for r in rollouts}


async def test_an_update_that_left_the_weights_alone_trained_nothing() -> None:
    store, rollouts = await _finished_groups()
    transitions = await TransitionBuilder().from_store(store, rollouts)
    assert not await record_update(store, _Versioned(0), transitions, version_before=0)
    assert set((await _first_reasons(store, rollouts)).values()) == {Reason.UPDATE_SKIPPED}


async def test_an_update_that_changed_the_weights_trained_the_groups_with_signal() -> None:
    store, rollouts = await _finished_groups()
    transitions = await TransitionBuilder().from_store(store, rollouts)
    assert await record_update(store, _Versioned(1), transitions, version_before=0)
    assert await _first_reasons(store, rollouts) == {
        "flat-1": Reason.NO_SIGNAL,
        "flat-2": Reason.NO_SIGNAL,
        "mixed-1": None,
        "mixed-2": None,
    }
    verdict = await TransitionBuilder().explain(store, await store.get_rollout("mixed-1"))
    assert [t.span_id for t in verdict.transitions] == [verdict.calls[0].span.span_id]


async def test_an_algorithm_that_keeps_flat_groups_trains_them() -> None:
    store, rollouts = await _finished_groups()
    transitions = await TransitionBuilder().from_store(store, rollouts)
    assert await record_update(store, _Versioned(1, skips_flat_groups=False), transitions, version_before=0)
    assert set((await _first_reasons(store, rollouts)).values()) == {None}


async def test_a_group_the_asynchronous_trainer_dropped_says_so() -> None:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="late", rollout_id="late")])
    claimed = await store.claim("w")
    assert claimed is not None
    _, attempt = claimed
    await store.add_spans([llm(10, "r1").model_copy(update={"rollout_id": "late", "attempt_id": attempt.attempt_id})])
    await store.finish_attempt("late", attempt.attempt_id, AttemptStatus.SUCCEEDED)
    await mark_dropped(store, ["late"], DropReason.STALENESS, policy_version=5)

    verdict = await TransitionBuilder().explain(store, await store.get_rollout("late"))

    assert verdict.reason is Reason.STALE
    assert [(call.reason, call.trained) for call in verdict.calls] == [(Reason.STALE, False)]
