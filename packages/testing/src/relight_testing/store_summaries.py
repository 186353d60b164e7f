"""The store conformance kit's summary half: :meth:`relight.store.Store.list_summaries` against the spans.

Part of :class:`relight_testing.store.StoreConformance`. A store keeps each rollout's summary as it
writes (:mod:`relight.summaries`); these tests fill a store with rollouts of every status, mode,
group, step, version, reward and role, then check that every filter, the order and the pages agree
with what the rollouts and their latest attempts' spans say when read one by one.
"""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from relight import semconv
from relight.errors import ConfigError, NotFoundError
from relight.records import AttemptStatus, Mode, Rollout, RolloutRequest, RolloutStatus, Span, SpanKind
from relight.store import Store
from relight.summaries import RolloutSummary, SummaryFilter, SummaryPage
from relight.transitions.builder import episode_return
from relight_testing.store_inputs import make_span

__all__ = ["SummaryConformance", "check_migrated", "fill_varied", "summaries_from_spans"]

_ROLES = ["solver", "critic", "team/writer"]


def _spans(attempt_id: str, rollout_id: str, number: int) -> list[Span]:
    """A root, role and LLM spans (some failed, some without token ids), rewards (some a role's own) and, for a
    few, a drop mark."""
    spans = [make_span(rollout_id, attempt_id, "root")]
    for call in range(number % 4):
        role = _ROLES[(number + call) % len(_ROLES)]
        spans.append(
            make_span(rollout_id, attempt_id, f"role{call}", attributes={semconv.SPAN_KIND: "role", semconv.ROLE: role})
        )
        llm: dict[str, object] = {semconv.SPAN_KIND: "llm"}
        if (number + call) % 5:
            llm |= {semconv.PROMPT_TOKEN_IDS: [1, 2], semconv.RESPONSE_TOKEN_IDS: [3]}
        span = make_span(rollout_id, attempt_id, f"llm{call}", attributes=llm)
        if (number + call) % 7 == 0:
            span = span.model_copy(update={"status_code": "ERROR"})
        spans.append(span)
    for index in range(number % 3):
        reward: dict[str, object] = {semconv.SPAN_KIND: "reward", semconv.REWARD: (number % 5) / 4 + index}
        spans.append(make_span(rollout_id, attempt_id, f"reward{index}", attributes=reward))
    if number % 4 == 3:  # a role's own reward: no part of the rollout's
        aimed: dict[str, object] = {semconv.SPAN_KIND: "reward", semconv.REWARD: 10.0, semconv.REWARD_ROLE: "critic"}
        spans.append(make_span(rollout_id, attempt_id, "critic's reward", attributes=aimed))
    if number % 11 == 4:
        dropped: dict[str, object] = {semconv.SPAN_KIND: "annotation", semconv.DROPPED_REASON: "staleness"}
        spans.append(make_span(rollout_id, attempt_id, "dropped", name=semconv.DROPPED_SPAN, attributes=dropped))
    return spans


async def fill_varied(store: Store, count: int = 36) -> None:
    """``count`` rollouts: succeeded, failed, retried, running, queued and cancelled, with varied spans."""
    requests = [
        RolloutRequest(
            input={"n": n},
            group_id=f"g{n % 4}",
            mode=Mode.VAL if n % 6 == 5 else Mode.TRAIN,
            resources_version=n % 3,
            metadata={"step": n // 9} if n % 10 else {},
            max_attempts=2,
        )
        for n in range(count)
    ]
    await store.enqueue(requests[:-4])
    for _ in range(2 * (count - 4)):  # first tries in order, then the retries (requeued behind them)
        claim = await store.claim("w")
        if claim is None:
            break
        rollout, attempt = claim
        n = rollout.input["n"] if isinstance(rollout.input, dict) else 0
        assert isinstance(n, int)
        await store.add_spans(_spans(attempt.attempt_id, rollout.rollout_id, n + attempt.number - 1))
        if n % 8 == 3 and attempt.number == 1:
            await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.FAILED, error="boom")
            continue
        if attempt.number == 2:  # a late span of the failed first try changes nothing
            await store.add_spans([make_span(rollout.rollout_id, f"{rollout.rollout_id}-a1", "late")])
        if n % 9 == 8:
            continue  # still running
        status = AttemptStatus.FAILED if n % 10 == 7 else AttemptStatus.SUCCEEDED
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, status)
    queued = await store.enqueue(requests[-4:])
    await store.cancel([queued[-1].rollout_id])


async def summaries_from_spans(store: Store) -> list[RolloutSummary]:
    """Each rollout's summary as its latest attempt's spans say, read one by one, newest first."""
    summaries: list[RolloutSummary] = []
    for rollout in reversed(await store.list_rollouts()):
        attempts = await store.list_attempts(rollout.rollout_id)
        spans = await store.query_spans(rollout.rollout_id, attempts[-1].attempt_id) if attempts else []
        llm = [s for s in spans if s.kind is SpanKind.LLM]
        untrainable = [s for s in llm if s.status_code != "ERROR" and semconv.RESPONSE_TOKEN_IDS not in s.attributes]
        roles = [str(s.attributes[semconv.ROLE]) for s in spans if s.kind is SpanKind.ROLE]
        summary = RolloutSummary(
            rollout=rollout,
            spans=len(spans),
            reward=episode_return(spans),
            roles={role: roles.count(role) for role in sorted(set(roles))},
            calls=len(llm),
            failed_calls=sum(s.status_code == "ERROR" for s in llm),
            untrainable_calls=len(untrainable),
            dropped=next(
                (str(s.attributes[semconv.DROPPED_REASON]) for s in spans if s.name == semconv.DROPPED_SPAN), None
            ),
        )
        summaries.append(summary)
    return summaries


async def check_migrated(store: Store, expected: list[RolloutSummary]) -> None:
    """A store opened on data written before summaries existed: they are all there, and kept from now on."""
    try:
        page = await store.list_summaries(limit=1000)
        assert [_without_change(summary) for summary in page.rows] == expected
        assert len({summary.changed for summary in page.rows}) == len(expected)
        (rollout, *_) = await store.enqueue([RolloutRequest(input="new")])
        after = await store.list_summaries(SummaryFilter(changed_after=page.changed))
        assert [summary.rollout for summary in after.rows] == [rollout]
    finally:
        await store.close()


def _without_change(summary: RolloutSummary) -> RolloutSummary:
    return summary.model_copy(update={"changed": 0})


_FILTERS = [
    SummaryFilter(),
    SummaryFilter(statuses=[RolloutStatus.SUCCEEDED]),
    SummaryFilter(statuses=[RolloutStatus.QUEUED, RolloutStatus.RUNNING]),
    SummaryFilter(statuses=[RolloutStatus.FAILED, RolloutStatus.CANCELLED]),
    SummaryFilter(mode=Mode.VAL),
    SummaryFilter(group_id="g2"),
    SummaryFilter(roles=["critic"]),
    SummaryFilter(roles=["team/writer", "solver"]),
    SummaryFilter(step=2),
    SummaryFilter(policy_version=1),
    SummaryFilter(min_reward=0.5),
    SummaryFilter(max_reward=0.5),
    SummaryFilter(min_reward=0.25, max_reward=1.0),
    SummaryFilter(min_attempts=2),
    SummaryFilter(min_calls=2),
    SummaryFilter(min_failed_calls=1),
    SummaryFilter(min_untrainable_calls=1),
    SummaryFilter(dropped="staleness"),
    SummaryFilter(mode=Mode.TRAIN, statuses=[RolloutStatus.SUCCEEDED], roles=["solver"], min_reward=0.0),
]


@pytest.mark.asyncio
class SummaryConformance:
    """The summary list of every backend: kept on write, filtered, ordered and paged as the spans say."""

    async def test_summary_follows_the_latest_attempt(self, store: Store) -> None:
        (rollout,) = await store.enqueue([RolloutRequest(input="x", metadata={"step": 3}, max_attempts=2)])
        (first,) = (await store.list_summaries()).rows
        assert first.rollout == rollout
        assert first.step == 3
        assert (first.spans, first.calls, first.reward, first.roles) == (0, 0, None, {})
        claim = await store.claim("w")
        assert claim is not None
        attempt = claim[1]
        spans = _spans(attempt.attempt_id, rollout.rollout_id, 6)  # 2 calls, one failed, no reward
        await store.add_spans(spans[:3])
        await store.add_spans(spans)  # a repeat is ignored, and not counted twice
        await store.add_spans(_spans(attempt.attempt_id, rollout.rollout_id, 5)[-2:])  # two rewards: 0.0 and 1.0
        (running,) = (await store.list_summaries()).rows
        assert running.rollout.status is RolloutStatus.RUNNING
        assert (running.spans, running.calls, running.failed_calls, running.reward) == (len(spans) + 2, 2, 1, 1.0)
        assert running.roles == {"critic": 1, "solver": 1}
        assert running.changed > first.changed
        await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.FAILED, error="boom")
        retry = await store.claim("w")
        assert retry is not None
        (fresh,) = (await store.list_summaries()).rows
        assert (fresh.rollout.attempt_count, fresh.spans, fresh.calls, fresh.reward, fresh.roles) == (2, 0, 0, None, {})
        await store.add_spans([make_span(rollout.rollout_id, attempt.attempt_id, "late")])
        assert (await store.list_summaries()).rows[0].spans == 0  # the first attempt no longer counts

    async def test_a_roles_own_reward_is_not_the_rollouts(self, store: Store) -> None:
        both, aimed_only = await store.enqueue([RolloutRequest(input="both"), RolloutRequest(input="aimed only")])
        for rollout, values in ((both, (1.0, 0.25)), (aimed_only, (None, 0.5))):
            claim = await store.claim("w")
            assert claim is not None
            outcome, own = values
            aimed: dict[str, object] = {semconv.SPAN_KIND: "reward", semconv.REWARD: own, semconv.REWARD_ROLE: "critic"}
            spans = [make_span(rollout.rollout_id, claim[1].attempt_id, "critic's", attributes=aimed)]
            if outcome is not None:
                reward: dict[str, object] = {semconv.SPAN_KIND: "reward", semconv.REWARD: outcome}
                spans.append(make_span(rollout.rollout_id, claim[1].attempt_id, "outcome", attributes=reward))
            await store.add_spans(spans)
        rows = {row.rollout.rollout_id: row for row in (await store.list_summaries()).rows}
        assert (rows[both.rollout_id].reward, rows[aimed_only.rollout_id].reward) == (1.0, None)

    async def test_summaries_agree_with_the_spans(self, store: Store) -> None:
        await fill_varied(store)
        expected = await summaries_from_spans(store)
        for where in _FILTERS:
            page = await store.list_summaries(where, limit=1000)
            wanted = [summary for summary in expected if where.matches(summary)]
            assert [_without_change(s) for s in page.rows] == wanted, where
            assert page.total == len(wanted), where
        statuses = {summary.rollout.status for summary in expected}
        assert statuses == set(RolloutStatus), "the varied store lacks a status"

    async def test_summaries_page_newest_first(self, store: Store) -> None:
        await fill_varied(store)
        everything = (await store.list_summaries(limit=1000)).rows
        assert [s.rollout.rollout_id for s in everything] == [
            r.rollout_id for r in reversed(await store.list_rollouts())
        ]
        where = SummaryFilter(mode=Mode.TRAIN)
        pages = [await store.list_summaries(where, limit=7, offset=offset) for offset in range(0, 42, 7)]
        assert {page.total for page in pages} == {len([s for s in everything if s.rollout.mode is Mode.TRAIN])}
        paged = list(itertools.chain.from_iterable(page.rows for page in pages))
        assert paged == [s for s in everything if s.rollout.mode is Mode.TRAIN]
        beyond = await store.list_summaries(where, limit=7, offset=1000)
        assert beyond.rows == []
        assert beyond.total == pages[0].total

    async def test_summaries_page_by_cursor_as_by_offset(self, store: Store) -> None:
        await fill_varied(store)
        where = SummaryFilter(mode=Mode.TRAIN)
        everything = (await store.list_summaries(where, limit=1000)).rows
        pages: list[SummaryPage] = []
        cursor: str | None = None
        while (page := await store.list_summaries(where.model_copy(update={"before": cursor}), limit=7)).rows:
            assert (page.total, page.offset) == (len(everything), 7 * len(pages))
            pages.append(page)
            cursor = page.rows[-1].rollout.rollout_id
        assert list(itertools.chain.from_iterable(page.rows for page in pages)) == everything
        assert (page.total, page.offset) == (len(everything), len(everything))  # past the end
        for earlier, later in itertools.pairwise(pages):
            back = await store.list_summaries(
                where.model_copy(update={"after": later.rows[0].rollout.rollout_id}), limit=7
            )
            assert (back.rows, back.offset) == (earlier.rows, earlier.offset)
        top = await store.list_summaries(where.model_copy(update={"after": everything[0].rollout.rollout_id}))
        assert (top.rows, top.offset, top.total) == ([], 0, len(everything))

    async def test_a_cursor_may_name_a_rollout_the_filter_leaves_out(self, store: Store) -> None:
        await fill_varied(store)
        listed = (await store.list_summaries(limit=1000)).rows
        at = next(i for i, s in enumerate(listed) if s.rollout.mode is Mode.VAL and i > 3)
        where = SummaryFilter(mode=Mode.TRAIN, before=listed[at].rollout.rollout_id)
        page = await store.list_summaries(where, limit=4)
        assert page.rows == [s for s in listed[at + 1 :] if s.rollout.mode is Mode.TRAIN][:4]
        assert page.offset == sum(s.rollout.mode is Mode.TRAIN for s in listed[:at])
        where = SummaryFilter(mode=Mode.TRAIN, after=listed[at].rollout.rollout_id)
        page = await store.list_summaries(where, limit=2)
        assert page.rows == [s for s in listed[:at] if s.rollout.mode is Mode.TRAIN][-2:]

    async def test_a_cursor_must_name_a_stored_rollout(self, store: Store) -> None:
        await store.enqueue([RolloutRequest(input="x")])
        with pytest.raises(NotFoundError, match="before='nope'"):
            await store.list_summaries(SummaryFilter(before="nope"))
        with pytest.raises(NotFoundError, match="after='nope'"):
            await store.list_summaries(SummaryFilter(after="nope"))
        with pytest.raises(ValidationError, match="changed_after"):
            SummaryFilter(after="x", changed_after=1)

    async def test_summaries_changed_after_a_number_come_in_change_order(self, store: Store) -> None:
        await fill_varied(store)
        seen = (await store.list_summaries(limit=1)).changed
        assert (await store.list_summaries(SummaryFilter(changed_after=seen))).rows == []
        running = (await store.list_summaries(SummaryFilter(statuses=[RolloutStatus.RUNNING]))).rows
        queued: list[Rollout] = await store.list_rollouts(status=RolloutStatus.QUEUED)
        await store.cancel([queued[0].rollout_id])
        rollout = running[0].rollout
        attempt_id = f"{rollout.rollout_id}-a{rollout.attempt_count}"
        await store.finish_attempt(rollout.rollout_id, attempt_id, AttemptStatus.SUCCEEDED)
        page = await store.list_summaries(SummaryFilter(changed_after=seen))
        assert [s.rollout.rollout_id for s in page.rows] == [queued[0].rollout_id, rollout.rollout_id]
        assert page.rows[0].changed < page.rows[1].changed <= page.changed
        assert page.rows[1].rollout.status is RolloutStatus.SUCCEEDED

    async def test_summary_list_refuses_bad_pages(self, store: Store) -> None:
        with pytest.raises(ConfigError, match="offset"):
            await store.list_summaries(offset=-1)
        with pytest.raises(ConfigError, match="limit"):
            await store.list_summaries(limit=-5)
