"""The group judge through the real loop: agent, gateway, store, and a scripted judge behind a real HTTP server.

The policy (a scripted upstream) echoes what the agent asks; each rollout asks with a number of its
own, so the judge (another scripted upstream) can rank a group by those numbers, highest first.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from rich.console import Console

from relight import Trainer, agent, semconv
from relight.agent import LLM
from relight.cli import main
from relight.dashboard.detail import rollout_detail
from relight.errors import ConfigError, NotFoundError
from relight.records import Rollout, Span, SpanKind
from relight.rewards import GroupReward, Judge, JudgeReplyError, group_reward, parse_reply, rank_rewards, render_rollout
from relight.scripted import ScriptedUpstream, ScriptRequest
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight.transitions.builder import TransitionBuilder, last_attempt_spans
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.store import make_span

_numbers = itertools.count(1)


@agent.rollout
async def asks_with_a_number(task: Mapping[str, Any], llm: LLM) -> None:
    """Asks once with a number no other rollout has; returns no reward, so the judge's is the only one."""
    async with openai.AsyncOpenAI(
        base_url=llm.base_url, api_key=llm.api_key, max_retries=0, http_client=httpx.AsyncClient()
    ) as client:
        question = f"{task['text']}: the answer is {next(_numbers)}"
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": question}])


def _attempts(request: ScriptRequest) -> dict[str, int]:
    """Each attempt's label and the number its final answer holds, read from the judge's prompt."""
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    return {
        label: int(number)
        for label, number in re.findall(r"=== Attempt (\w+) ===.*?\[final answer\] .*?is (\d+)", user, re.S)
    }


def ranks_by_number(request: ScriptRequest) -> str:
    """A judge that ranks the attempts by their number, highest first."""
    attempts = _attempts(request)
    order = sorted(attempts, key=lambda label: -attempts[label])
    ranking = [
        {"id": label, "rank": rank, "reason": f"{attempts[label]} is big"} for rank, label in enumerate(order, 1)
    ]
    return "Here is my ranking:\n```json\n" + json.dumps({"ranking": ranking}) + "\n```"


async def _fit(
    judge: Judge, tasks: int = 2, **options: Any
) -> tuple[list[dict[str, float]], RecordingAlgorithm, InMemoryStore]:
    store = InMemoryStore()
    with tempfile.TemporaryDirectory() as run_dir:
        async with ScriptedUpstream() as policy:
            algorithm = RecordingAlgorithm(policy)
            trainer = Trainer(
                algorithm,
                store=store,
                run_dir=run_dir,
                batch_size=tasks,
                n_samples=4,
                group_rewards=[judge],
                console=Console(file=io.StringIO()),
                **options,
            )
            history = await trainer.afit(asks_with_a_number, [{"text": f"task {i}"} for i in range(tasks)])
    return history, algorithm, store


async def _spans(store: InMemoryStore, rollout: Rollout) -> list[Span]:
    return await last_attempt_spans(store, rollout.rollout_id)


def _number(spans: Sequence[Span]) -> int:
    (call,) = [s for s in spans if s.kind is SpanKind.LLM]
    (message,) = json.loads(str(call.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
    return int(message["content"].rsplit(" ", 1)[1])


def _notes(spans: Sequence[Span]) -> list[dict[str, Any]]:
    return [
        json.loads(str(s.attributes[semconv.ANNOTATION]))
        for s in spans
        if s.kind is SpanKind.ANNOTATION and s.name == "annotation judge"
    ]


async def test_a_groups_ranking_becomes_its_rewards_and_the_judge_is_never_trained() -> None:
    async with ScriptedUpstream(ranks_by_number, model="judge") as judge_server:
        judge = Judge("Bigger numbers are better.", base_url=judge_server.base_url, model="judge")
        (step,), algorithm, store = await _fit(judge)
        judge_requests = list(judge_server.requests)
    (batch,) = algorithm.batches
    assert len(batch) == 8, "one transition per policy call: the judge's calls are not the policy's"
    assert len(judge_requests) == 2, "one judge call per group"
    by_rollout = {t.rollout_id: t.reward for t in batch}
    for group in {t.group_id for t in batch}:
        rollouts = await store.list_rollouts(group_id=group)
        numbers = {r.rollout_id: _number(await _spans(store, r)) for r in rollouts}
        order = sorted(numbers, key=lambda rid: -numbers[rid])
        assert [by_rollout[rid] for rid in order] == [1.0, pytest.approx(2 / 3), pytest.approx(1 / 3), 0.0]
        for rid in order:
            (note,) = _notes(await _spans(store, next(r for r in rollouts if r.rollout_id == rid)))
            assert note["reason"] == f"{numbers[rid]} is big"
            assert note["reward"] == pytest.approx(by_rollout[rid])
    assert (step["judge_groups"], step["judge_groups_no_signal"]) == (2, 0)
    assert (step["judge_calls"], step["judge_retries"]) == (2, 0)
    assert min(step["judge_input_tokens"], step["judge_output_tokens"], step["judge_latency_s"]) > 0
    assert step["groups_no_signal"] == 0


async def test_a_malformed_reply_is_retried_then_the_group_is_left_without_signal_and_counted() -> None:
    async with ScriptedUpstream(lambda _request: "I'd rather not rank these.", model="judge") as judge_server:
        judge = Judge(base_url=judge_server.base_url, model="judge", max_tries=3)
        (step,), algorithm, store = await _fit(judge)
        judge_requests = list(judge_server.requests)
    assert len(judge_requests) == 6, "three tries for each of the two groups"
    corrected = judge_requests[-1]["messages"]
    assert corrected[-2] == {"role": "assistant", "content": "I'd rather not rank these."}
    assert "holds no JSON object" in corrected[-1]["content"]
    (batch,) = algorithm.batches
    assert {t.reward for t in batch} == {0.0}, "no made-up score: no reward at all"
    for rollout in await store.list_rollouts():
        spans = await _spans(store, rollout)
        assert not [s for s in spans if s.kind is SpanKind.REWARD]
        (note,) = _notes(spans)
        assert (note["no_signal"], note["tries"]) == ("malformed", 3)
    assert (step["judge_groups"], step["judge_groups_no_signal"]) == (2, 2)
    assert (step["judge_calls"], step["judge_retries"]) == (6, 4)
    assert step["groups_no_signal"] == 2


async def test_a_reply_corrected_on_the_second_try_is_used() -> None:
    def wrong_then_right(request: ScriptRequest) -> str:
        return '{"ranking": "A > B"}' if request.turn == 0 else ranks_by_number(request)

    async with ScriptedUpstream(wrong_then_right, model="judge") as judge_server:
        judge = Judge(base_url=judge_server.base_url, model="judge")
        (step,), algorithm, _ = await _fit(judge, tasks=1)
    assert (step["judge_calls"], step["judge_retries"], step["judge_groups_no_signal"]) == (2, 1, 0)
    assert sorted(t.reward for t in algorithm.batches[0]) == [0.0, pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0]


async def test_a_judge_that_hangs_costs_its_group_the_signal_not_the_step() -> None:
    released = threading.Event()

    def hangs_on_task_0(request: ScriptRequest) -> str:
        if "task 0" in str(request.messages[-1]["content"]):
            released.wait()
        return ranks_by_number(request)

    with ScriptedUpstream(hangs_on_task_0, model="judge", script_on_thread=True) as judge_server:
        try:
            judge = Judge(base_url=judge_server.base_url, model="judge", timeout=1.0, max_tries=2)
            (step,), algorithm, store = await _fit(judge, max_staleness=0)
        finally:
            released.set()
    assert (step["judge_groups"], step["judge_groups_no_signal"]) == (2, 1)
    rewards: dict[str, list[float]] = {}
    for t in algorithm.batches[0]:
        rewards.setdefault(t.group_id, []).append(t.reward)
    assert sorted(rewards["step1-task0"]) == [0.0] * 4
    assert sorted(rewards["step1-task1"]) == [0.0, pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0]
    for rollout in await store.list_rollouts(group_id="step1-task0"):
        (note,) = _notes(await _spans(store, rollout))
        assert note["no_signal"] == "timeout"


async def test_a_gate_keeps_rollouts_from_the_judge_and_the_weight_scales_its_reward() -> None:
    async with ScriptedUpstream(ranks_by_number, model="judge") as judge_server:
        judge = Judge(
            base_url=judge_server.base_url,
            model="judge",
            weight=2.0,
            gated_reward=-0.5,
            gate=lambda rendered: int(rendered.final_answer.rsplit(" ", 1)[1]) % 2 == 0,
        )
        _, algorithm, store = await _fit(judge, tasks=1)
        (request,) = judge_server.requests
    shown = _attempts(ScriptRequest("chat", request))
    assert shown
    assert all(number % 2 == 0 for number in shown.values())
    for t in algorithm.batches[0]:
        rollout = await store.get_rollout(t.rollout_id)
        number = _number(await _spans(store, rollout))
        if number % 2:
            assert t.reward == -1.0
        else:
            assert t.reward == (2.0 if number == max(shown.values()) else 0.0)


async def test_rubric_scores_become_rewards_out_of_ten() -> None:
    def grades(request: ScriptRequest) -> str:
        attempts = _attempts(request)
        low = min(attempts.values())
        return json.dumps(
            {"scores": [{"id": label, "score": 2 * (n - low), "reason": "ok"} for label, n in attempts.items()]}
        )

    async with ScriptedUpstream(grades, model="judge") as judge_server:
        judge = Judge("Grade by size.", base_url=judge_server.base_url, model="judge", mode="score")
        _, algorithm, _ = await _fit(judge, tasks=1)
    assert sorted(t.reward for t in algorithm.batches[0]) == [0.0, 0.2, 0.4, pytest.approx(0.6)]


def test_ranks_become_rewards_ties_sharing_half() -> None:
    assert rank_rewards([1, 2, 3]) == [1.0, 0.5, 0.0]
    assert rank_rewards([1, 2, 2, 4]) == [1.0, 0.5, 0.5, 0.0]
    assert rank_rewards([1, 1, 1]) == [0.5, 0.5, 0.5]
    assert rank_rewards([1]) == [1.0]


@pytest.mark.parametrize(
    ("reply", "complaint"),
    [
        ("I cannot judge this.", "holds no JSON object"),
        ('{"ranking": [{"id": "A", "rank": 1}]}', "leaves out attempt(s) B"),
        ('{"ranking": [{"id": "A", "rank": 1}, {"id": "A", "rank": 2}]}', "names attempt A twice"),
        ('{"ranking": [{"id": "A", "rank": 1}, {"id": "C", "rank": 2}]}', "names attempt 'C'"),
        ('{"ranking": [{"id": "A", "rank": 1}, {"id": "B", "rank": 3}]}', "from 1 to 2"),
        ('{"ranking": [{"id": "A", "rank": 1}, {"id": "B", "rank": "2"}]}', "must be a number"),
        ('{"scores": []}', 'no "ranking" list'),
    ],
)
def test_a_malformed_ranking_says_what_is_wrong(reply: str, complaint: str) -> None:
    with pytest.raises(JudgeReplyError, match=re.escape(complaint)):
        parse_reply(reply, ["A", "B"], "rank")


def test_rubric_scores_are_grades_out_of_ten() -> None:
    verdicts = parse_reply(
        '{"scores": [{"id": "A", "score": 7, "reason": "ok"}, {"id": "B", "score": 0}]}', ["A", "B"], "score"
    )
    assert (verdicts["A"].value, verdicts["A"].reason, verdicts["B"].value) == (7.0, "ok", 0.0)
    with pytest.raises(JudgeReplyError, match="from 0 to 10"):
        parse_reply('{"scores": [{"id": "A", "score": 11}, {"id": "B", "score": 0}]}', ["A", "B"], "score")


async def test_the_judges_reasons_show_in_relight_show_and_the_dashboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    url = f"sqlite:///{tmp_path}/store.db"
    async with ScriptedUpstream(ranks_by_number, model="judge") as judge_server, ScriptedUpstream() as policy:
        judge = Judge(base_url=judge_server.base_url, model="judge")
        trainer = Trainer(
            RecordingAlgorithm(policy),
            store=url,
            run_dir=tmp_path / "run",
            batch_size=1,
            n_samples=2,
            group_rewards=[judge],
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(asks_with_a_number, [{"text": "task 0"}])
    store = SqliteStore.from_url(url)
    try:
        rollout_id = (await store.list_rollouts())[0].rollout_id
        detail = await rollout_detail(store, TransitionBuilder(), rollout_id, None)
    finally:
        await store.close()
    annotations = cast(list[dict[str, Any]], detail["annotations"])
    (annotation,) = annotations  # the trainer's own record of trained calls is shown per call, not here
    assert annotation["payload"]["reason"].endswith("is big")
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["show", rollout_id, "--store", url]) == 0
    shown = capsys.readouterr().out
    (line,) = [line for line in shown.splitlines() if "annotation judge" in line]
    assert "[annotation]" in line
    assert "is big" in line
    assert "reward judge" in shown


def _llm_span(index: int, messages: list[dict[str, Any]], output: str) -> Span:
    attributes = {
        semconv.SPAN_KIND: SpanKind.LLM.value,
        semconv.GEN_AI_INPUT_MESSAGES: json.dumps(messages),
        semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "content": output}]),
    }
    return make_span("ro-1", "at-1", f"s{index}", start_time=1_000 * (index + 1), attributes=attributes)


def test_a_long_rollout_is_trimmed_to_the_budget_keeping_the_task_and_the_final_answer() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "secret instructions"},
        {"role": "user", "content": "Q?"},
    ]
    spans = []
    for index in range(30):
        spans.append(_llm_span(index, list(history), f"thought {index} " + "x" * 200))
        history += [
            {"role": "assistant", "content": f"thought {index} " + "x" * 200},
            {"role": "user", "content": "go on"},
        ]
    spans.append(_llm_span(30, history, "The answer is 42. " + "y" * 5000))
    rendered = render_rollout("ro-1", spans, max_chars=2000)
    assert len(rendered.text) <= 2000 + 200, "the budget, and the final answer cut to a third of it"
    assert rendered.text.startswith("[user] Q?\n[… ")
    assert "message(s) left out to fit the judge's budget" in rendered.text
    assert "[final answer] The answer is 42." in rendered.text
    assert "characters left out" in rendered.text
    assert "secret instructions" not in rendered.text
    assert rendered.lines.count("[user] go on") == 1, "equal messages are shown once"
    assert rendered.final_answer.startswith("The answer is 42.")


def test_the_judge_is_a_group_reward_registered_by_name() -> None:
    judge = group_reward("judge", base_url="http://127.0.0.1:9/v1", model="m", mode="score")
    assert isinstance(judge, Judge)
    assert isinstance(judge, GroupReward)
    assert (judge.name, judge.mode) == ("judge", "score")
    with pytest.raises(NotFoundError, match="no group reward named 'ruler'"):
        group_reward("ruler")
    with pytest.raises(ConfigError, match="mode must be 'rank' or 'score'"):
        Judge(base_url="http://127.0.0.1:9/v1", model="m", mode=cast(Any, "vote"))
    with pytest.raises(ConfigError, match="distinct names"):
        Trainer(group_rewards=[judge, judge])


def test_a_call_the_client_sent_again_before_it_ended_shows_only_its_retry() -> None:
    asked = [{"role": "user", "content": "Q?"}]
    given_up = _llm_span(0, asked, "a reply nobody read").model_copy(update={"end_time": 5_000})
    retry = _llm_span(1, asked, "the reply the agent got")
    rendered = render_rollout("ro-1", [given_up, retry])
    assert "nobody read" not in rendered.text
    assert rendered.final_answer == "the reply the agent got"
    asked_again = _llm_span(9, asked, "a second sample, asked after the first ended")
    assert (
        "[assistant] a reply nobody read"
        in render_rollout("ro-1", [_llm_span(0, asked, "a reply nobody read"), asked_again]).lines
    )
