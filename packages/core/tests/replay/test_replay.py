"""``relight replay`` of recorded plain-Python rollouts: the calculator scenario's agent, run again in-process.

The recording is a real training run's store. A replay with the same agent makes the same calls and leaves
the same spans (ids and times aside); an agent whose tool was changed diverges at the call that carries the
tool's result, and one that asks once more diverges after the recording's last call. The recording's store
is only read.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from relight import semconv
from relight.cli import main
from relight.plugins import open_store
from relight.records import Span, SpanKind
from relight.scripted import ScriptedUpstream
from relight.training.trainer import Trainer
from relight_testing import calculator_scenario as scenario
from relight_testing.algorithms import RecordingAlgorithm

AGENT = "relight_testing.calculator_scenario:calculator_agent"
IDS_AND_TIMES = {semconv.GEN_AI_RESPONSE_ID, semconv.ROLLOUT_ID, semconv.ATTEMPT_ID, semconv.UPSTREAM}
"""What names one run of a span (its response id, attempt, the server's address), beside the span's own ids."""


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store of a finished training run of the scenario."""
    folder = tmp_path_factory.mktemp("recorded") / "run"

    async def fit() -> None:
        async with ScriptedUpstream(scenario.script) as upstream:
            trainer = Trainer(
                RecordingAlgorithm(upstream),
                batch_size=3,
                n_samples=3,
                run_dir=folder,
                console=Console(file=io.StringIO()),
            )
            await trainer.afit(scenario.calculator_agent, scenario.tasks())

    asyncio.run(fit())
    return f"sqlite:///{folder / 'store.db'}"


def read(url: str) -> dict[str, Any]:
    """Everything a store holds that a replay must leave alone: rollouts, attempts and spans."""

    async def go() -> dict[str, Any]:
        store = open_store(url)
        try:
            rollouts = await store.list_rollouts()
            return {
                r.rollout_id: (
                    r.model_dump(mode="json"),
                    [a.model_dump(mode="json") for a in await store.list_attempts(r.rollout_id)],
                    [s.model_dump(mode="json") for s in await store.query_spans(r.rollout_id)],
                )
                for r in rollouts
            }
        finally:
            await store.close()

    return asyncio.run(go())


def essence(spans: list[Span]) -> list[str]:
    """The spans the agent's attempt left, as JSON without ids and times (a parent named by its name)."""
    names = {span.span_id: span.name for span in spans}
    kept = [s for s in spans if not (s.kind is SpanKind.ANNOTATION and s.name.startswith("relight."))]
    return sorted(
        json.dumps(
            {
                "name": s.name,
                "status": [s.status_code, s.status_message],
                "parent": names.get(s.parent_id or ""),
                "attributes": {k: v for k, v in s.attributes.items() if k not in IDS_AND_TIMES},
            },
            sort_keys=True,
        )
        for s in kept
    )


def spans_of(url: str, rollout_id: str) -> list[Span]:
    async def go() -> list[Span]:
        store = open_store(url)
        try:
            return await store.query_spans(rollout_id)
        finally:
            await store.close()

    return asyncio.run(go())


def rollout_id(url: str, a: int, sample: int) -> str:
    """The training rollout of task ``a``'s ``sample``-th sample."""
    return next(
        rid for rid, (rollout, _, _) in read(url).items() if rollout["input"]["a"] == a and rid.endswith(f"-s{sample}")
    )


@pytest.mark.parametrize(("a", "sample", "calls"), [(2, 0, 2), (3, 1, 1)], ids=["through the tool", "answered at once"])
def test_a_replay_makes_the_recorded_calls_and_leaves_the_same_spans(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], a: int, sample: int, calls: int
) -> None:
    before = read(recorded)
    rid = rollout_id(recorded, a, sample)
    replayed = f"sqlite:///{tmp_path / 'replay.db'}"
    assert main(["replay", rid, "--store", recorded, "--replay-store", replayed, "--", AGENT]) == 0
    out = capsys.readouterr().out
    assert f"{calls} of {calls} recorded call(s) answered" in out
    assert "spans: the same as recorded, ids and times aside" in out
    (replay_id,) = read(replayed)
    assert replay_id.startswith(f"{rid}-replay-")
    assert f"as {replay_id}: " in out
    original, again = spans_of(recorded, rid), spans_of(replayed, replay_id)
    assert sum(s.kind is SpanKind.LLM for s in again) == calls
    assert essence(again) == essence(original)
    assert {s.span_id for s in again}.isdisjoint(s.span_id for s in original)  # new spans, in the other store
    assert read(recorded) == before  # the recording's store is only read


def test_a_changed_tool_diverges_at_the_call_that_carries_its_result(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "changed.py").write_text(
        "from relight_testing.calculator_scenario import calculate, calculator_agent, make_agent\n"
        "agent = make_agent(lambda expression: str(int(calculate(expression)) + 1))  # a tool changed, wrongly\n"
        "def asks_again(task, llm):\n"
        "    calculator_agent(task, llm)\n"
        "    return calculator_agent(task, llm)\n"
    )
    monkeypatch.chdir(tmp_path)
    before = read(recorded)
    rid = rollout_id(recorded, 2, 0)
    assert main(["replay", rid, "--store", recorded, "--json", "--", "changed:agent"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["diverged"] is True
    assert (result["divergence"]["call"], result["divergence"]["recorded_call"]) == (2, 2)
    explanation = result["divergence"]["explanation"]
    assert "call 2: the agent's request differs from the recording's call 2\n(its messages)" in explanation
    assert '-    "content": "14",' in explanation
    assert '+    "content": "15",' in explanation
    assert result["status"] == "failed"  # the scripted model refused the request the recording never answered
    assert "409" in result["error"]

    direct = rollout_id(recorded, 3, 0)  # answered at once: the agent asks a second time, which nothing answers
    assert main(["replay", direct, "--store", recorded, "--", "changed:asks_again"]) == 1
    out = capsys.readouterr().out
    assert "diverged at call 2: the agent made more calls than the recording's 1" in out
    assert read(recorded) == before


def test_bad_input_is_refused_with_2(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    rid = rollout_id(recorded, 2, 0)
    assert main(["replay", "nowhere", "--store", recorded, "--", AGENT]) == 2
    assert "rollout 'nowhere' does not exist" in capsys.readouterr().err
    assert main(["replay", rid, "--store", recorded, "--attempt", "a9", "--", AGENT]) == 2
    assert f"rollout {rid!r} has no attempt 'a9'; its attempts: {rid}-a1" in capsys.readouterr().err
    assert main(["replay", rid, "--store", recorded, "--", "relight_nowhere:agent"]) == 2
    assert "cannot import agent 'relight_nowhere:agent'" in capsys.readouterr().err
    assert main(["replay", rid, "--store", recorded, "--replay-store", recorded, "--", AGENT]) == 2
    assert "a replay never writes into the store it reads" in capsys.readouterr().err
