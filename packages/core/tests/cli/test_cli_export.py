"""``relight export`` on a real SQLite store."""

import asyncio
from pathlib import Path

import pytest

from relight import semconv
from relight.cli import main
from relight.records import AttemptStatus, RolloutRequest
from relight.stores.sqlite import SqliteStore
from relight.transitions.jsonl import read_jsonl
from relight_testing.store import make_span


async def fill(url: str) -> str:
    """One succeeded rollout with two calls and a final reward of 1; one queued. Returns the rollout id."""
    store = SqliteStore.from_url(url)
    await store.enqueue([RolloutRequest(input="t", group_id="task-1"), RolloutRequest(input="later")])
    claimed = await store.claim("w")
    assert claimed is not None
    rollout, attempt = claimed
    calls = [
        make_span(
            rollout.rollout_id,
            attempt.attempt_id,
            f"llm{i}",
            start_time=1_000 * (i + 1),
            attributes={
                semconv.SPAN_KIND: "llm",
                semconv.PROMPT_TOKEN_IDS: [1, 2],
                semconv.RESPONSE_TOKEN_IDS: [3 + i],
                semconv.RESPONSE_LOGPROBS: [-0.5],
            },
        )
        for i in range(2)
    ]
    reward = make_span(
        rollout.rollout_id,
        attempt.attempt_id,
        "r",
        start_time=9_000,
        attributes={semconv.SPAN_KIND: "reward", semconv.REWARD: 1.0},
    )
    await store.add_spans([*calls, reward])
    await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, AttemptStatus.SUCCEEDED)
    await store.close()
    return rollout.rollout_id


def test_export_writes_the_credited_transitions_of_finished_rollouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    rollout_id = asyncio.run(fill(url))
    out = tmp_path / "transitions.jsonl"

    assert main(["export", "--store", url, "--out", str(out), "--credit", "discounted", "--gamma", "0.5"]) == 0

    transitions = read_jsonl(out)
    assert [(t.rollout_id, t.group_id, t.response_token_ids, t.reward) for t in transitions] == [
        (rollout_id, "task-1", [3], 0.5),
        (rollout_id, "task-1", [4], 1.0),
    ]
    assert "wrote 2 transition(s)" in capsys.readouterr().err
