"""A role's own reward (``emit_reward(..., role=...)``): credited to that role's calls, never the episode's return."""

import itertools
from collections.abc import AsyncIterator

import pytest

from relight import attempt_scope, emit_reward, semconv, tracing
from relight.records import AttemptStatus, Rollout, RolloutRequest, Span, SpanKind
from relight.stores.memory import InMemoryStore
from relight.tracing.batcher import SpanBatcher
from relight.transitions.builder import TransitionBuilder, episode_return, last_attempt_spans

_ids = itertools.count()


def call(rollout_id: str, attempt_id: str, start: int, role: str) -> Span:
    """An LLM span that named its role on arrival, as the gateway records one."""
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        span_id=f"llm{next(_ids)}",
        trace_id="t",
        name="chat",
        start_time=start,
        end_time=start + 5,
        attributes={
            semconv.SPAN_KIND: SpanKind.LLM.value,
            semconv.ROLE: role,
            semconv.PROMPT_TOKEN_IDS: [1, 2],
            semconv.RESPONSE_TOKEN_IDS: [3],
        },
    )


@pytest.fixture
async def store() -> AsyncIterator[InMemoryStore]:
    store = InMemoryStore()
    yield store
    await store.close()


async def attempt(store: InMemoryStore, rewards: list[tuple[float, str | None]], status: AttemptStatus) -> Rollout:
    """One attempt: a writer's call, a checker's call, a writer's call, then ``rewards`` emitted by the agent."""
    await store.enqueue([RolloutRequest(input="task", group_id="g", max_attempts=1)])
    claim = await store.claim("w")
    assert claim is not None
    rollout_id, attempt_id = claim[1].rollout_id, claim[1].attempt_id
    calls = ((10, "w"), (20, "c"), (30, "w"))
    await store.add_spans([call(rollout_id, attempt_id, start, role) for start, role in calls])
    batcher = SpanBatcher(store)
    tracing.install(batcher)
    try:
        with attempt_scope(rollout_id, attempt_id):
            for value, role in rewards:
                emit_reward(value, name="checker" if role else "reward", role=role)
        await batcher.flush()
    finally:
        tracing.uninstall()
        await batcher.aclose()
    error = None if status is AttemptStatus.SUCCEEDED else "the agent raised"
    return await store.finish_attempt(rollout_id, attempt_id, status, error=error)


@pytest.mark.parametrize("credit", ["identical", "discounted", "per_step", "air"])
async def test_a_roles_reward_reaches_its_calls_and_stays_out_of_the_return(store: InMemoryStore, credit: str) -> None:
    rollout = await attempt(store, [(0.25, "c"), (1.0, None)], AttemptStatus.SUCCEEDED)
    builder = (
        TransitionBuilder(credit=credit, gamma=1.0) if credit == "discounted" else TransitionBuilder(credit=credit)
    )
    transitions = await builder.from_store(store, [rollout])
    credited = [(t.role, t.reward) for t in transitions]
    # per_step: the outcome follows the last call; the checker's reward follows the checker's own call
    writer = [0.0, 1.0] if credit == "per_step" else [1.0, 1.0]
    assert credited == [("w", writer[0]), ("c", 0.25), ("w", writer[1])]
    spans = await last_attempt_spans(store, rollout.rollout_id)
    reward_span = next(s for s in spans if s.kind is SpanKind.REWARD and s.attributes[semconv.REWARD] == 0.25)
    assert reward_span.attributes[semconv.REWARD_ROLE] == "c"
    assert episode_return(spans) == 1.0
    (summary,) = (await store.list_summaries()).rows
    assert summary.reward == 1.0


async def test_an_attempt_with_only_a_roles_reward_has_no_return(store: InMemoryStore) -> None:
    rollout = await attempt(store, [(0.5, "c")], AttemptStatus.SUCCEEDED)
    transitions = await TransitionBuilder().from_store(store, [rollout])
    assert [(t.role, t.reward) for t in transitions] == [("w", 0.0), ("c", 0.5), ("w", 0.0)]
    assert episode_return(await last_attempt_spans(store, rollout.rollout_id)) is None


async def test_a_failed_attempt_gives_the_other_roles_the_failed_reward(store: InMemoryStore) -> None:
    rollout = await attempt(store, [(0.5, "c")], AttemptStatus.FAILED)
    builder = TransitionBuilder(include_failed=True, failed_reward=-1.0)
    transitions = await builder.from_store(store, [rollout])
    assert [(t.role, t.reward) for t in transitions] == [("w", -1.0), ("c", 0.5), ("w", -1.0)]


async def test_a_role_with_a_reward_of_its_own_forms_groups_of_its_own(store: InMemoryStore) -> None:
    # The checker's credit is its verdicts' accuracy, the writer's the outcome: two signals a group-relative
    # algorithm must not normalise together, as it would if one policy trained both roles.
    rollout = await attempt(store, [(0.25, "c"), (1.0, None)], AttemptStatus.SUCCEEDED)
    one_policy = TransitionBuilder(policies={"shared": ["w", "c"]})
    transitions = await one_policy.from_store(store, [rollout])
    assert [(t.role, t.group_id, t.policy) for t in transitions] == [
        ("w", "g", "shared"),
        ("c", "g/c", "shared"),
        ("w", "g", "shared"),
    ]
    only_outcome = await attempt(store, [(1.0, None)], AttemptStatus.SUCCEEDED)
    assert {t.group_id for t in await one_policy.from_store(store, [only_outcome])} == {"g"}


def test_a_reward_role_must_name_a_role() -> None:
    with attempt_scope("r", "r-a1"), pytest.raises(ValueError, match="reward role must be"):
        emit_reward(1.0, role="")
