"""A run a person can watch and trust: the role filter checked early, progress lines in a log, the run
folder, and steps without learning signal said out loud. Real runner, gateway, openai client and server."""

import asyncio
import io
import itertools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openai
import pytest
from rich.console import Console

import relight
from relight import Trainer
from relight.agent import LLM, rollout
from relight.errors import ConfigError
from relight.records import RolloutStatus
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.tracing.agent_spans import end_role_span, start_role_span
from relight.transitions.builder import TransitionBuilder
from relight_testing.agents import three_calls
from relight_testing.algorithms import RecordingAlgorithm

ROLES = ("write_query", "check_query")


@rollout
async def sql_agent(task: Mapping[str, Any], llm: LLM) -> float:
    """Two calls named by role spans, as an adapter records them; ``hang`` then waits for :data:`_release`."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for role in ROLES:
            span = start_role_span(role, framework="test")
            messages: Any = [{"role": "user", "content": f"{task['text']} {role}"}]
            completion = await client.chat.completions.create(model=llm.model, messages=messages)
            if span is not None:
                end_role_span(span, response_id=completion.id)
    if task.get("hang"):
        await _release.wait()
    return 1.0


_release = asyncio.Event()


class SpanReadsRelease(InMemoryStore):
    """Lets hanging agents go once someone reads spans: the trainer reads them early only to check roles."""

    async def query_spans(self, *args: Any, **kwargs: Any) -> Any:
        _release.set()
        return await super().query_spans(*args, **kwargs)


_draws = itertools.count()


@rollout
def flat_then_mixed(task: Mapping[str, Any], llm: LLM) -> float:
    """Reward 0 for the first two rollouts run, then 1 and 0 alternately: the first round has no signal."""
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": str(task["text"])}])
    draw = next(_draws)
    return 0.0 if draw < 2 else float(draw % 2)


async def test_a_role_regex_is_searched_in_the_role_path(tmp_path: Path) -> None:
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=InMemoryStore(),
            batch_size=2,
            n_samples=1,
            transitions=TransitionBuilder(roles="write|rewrite"),
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(sql_agent, [{"text": "a"}, {"text": "b"}])
    (batch,) = algorithm.batches
    assert [t.role for t in batch] == ["write_query", "write_query"]


async def test_a_role_filter_matching_nothing_stops_the_run_at_the_first_rollouts(tmp_path: Path) -> None:
    store = SpanReadsRelease()
    _release.clear()
    tasks = [{"text": f"quick {i}"} for i in range(4)] + [{"text": f"slow {i}", "hang": True} for i in range(12)]
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=store,
            concurrency=4,
            batch_size=len(tasks),
            n_samples=1,
            transitions=TransitionBuilder(roles="^write$"),
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        with pytest.raises(ConfigError) as raised:
            await trainer.afit(sql_agent, tasks)
    message = str(raised.value)
    assert "roles='^write$'" in message
    assert re.search(r"'write_query' \(\d call\(s\)\), 'check_query' \(\d call\(s\)\)", message)
    assert algorithm.batches == []
    statuses = [r.status for r in await store.list_rollouts()]
    assert statuses.count(RolloutStatus.QUEUED) >= 4  # stopped long before the batch was done
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


async def test_progress_lines_when_the_output_is_not_a_terminal(tmp_path: Path) -> None:
    output = io.StringIO()
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            RecordingAlgorithm(upstream),
            store=InMemoryStore(),
            batch_size=2,
            n_samples=2,
            progress_every=0.0,
            run_dir=tmp_path,
            console=Console(file=output, width=80),
        )
        await trainer.afit(three_calls, [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}])
    text = output.getvalue()
    for step in (1, 2):
        assert re.search(rf"^step {step}: rollouts 4/4  0 failed  [\d.]+ calls/s  \d+ s$", text, re.MULTILINE)
        assert re.search(rf"^step {step}  loss=0  policy_version={step} .*reward_mean=1 ", text, re.MULTILINE)
    assert f"run folder {tmp_path}" in text.replace("\n", "")


async def test_every_fit_writes_a_run_folder_with_its_store(tmp_path: Path) -> None:
    output = io.StringIO()
    run_dir = tmp_path / "run"
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            RecordingAlgorithm(upstream),
            batch_size=1,
            n_samples=2,
            val_every=2,
            run_dir=run_dir,
            console=Console(file=output, width=300),
        )
        await trainer.afit(three_calls, [{"text": "a"}, {"text": "b"}, {"text": "c"}], [{"text": "v"}])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kinds = [("val", 0), ("train", 1), ("train", 2), ("val", 2), ("train", 3), ("val", 3)]
    assert [(row["kind"], row["step"]) for row in rows] == kinds
    assert (rows[0]["val_reward_mean"], rows[1]["reward_mean"]) == (1.0, 1.0)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert (summary["steps"], summary["policy_version"], summary["final_val_reward_mean"]) == (3, 3, 1.0)
    assert summary["store"] == f"sqlite:///{run_dir / 'store.db'}"
    assert (run_dir / "reward_curve.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-3"]
    store = relight.open_store(summary["store"])
    try:
        assert len(await store.list_rollouts()) == 3 * 2 + 3  # train and val rollouts, kept in the folder
    finally:
        await store.close()
    text = output.getvalue()
    assert text.count(str(run_dir)) >= 2  # said at the start and at the end


async def test_a_step_without_learning_signal_is_counted_and_warned_about(tmp_path: Path) -> None:
    output = io.StringIO()
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            RecordingAlgorithm(upstream),
            store=InMemoryStore(),
            batch_size=2,
            n_samples=2,
            run_dir=tmp_path,
            console=Console(file=output, width=300),
        )
        (metrics,) = await trainer.afit(three_calls, [{"text": "a"}, {"text": "b"}])
    assert (metrics["groups"], metrics["groups_no_signal"]) == (2, 2)
    assert "warning: step 1: all 2 group(s) have equal rewards" in output.getvalue()


async def test_dynamic_sampling_samples_a_flat_task_again_into_its_group(tmp_path: Path) -> None:
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        trainer = Trainer(
            algorithm,
            store=InMemoryStore(),
            batch_size=1,
            n_samples=2,
            concurrency=1,
            dynamic_sampling=3,
            run_dir=tmp_path,
            console=Console(file=io.StringIO()),
        )
        (metrics,) = await trainer.afit(flat_then_mixed, [{"text": "a"}])
    (batch,) = algorithm.batches
    assert (metrics["sampling_rounds"], metrics["rollouts"], metrics["groups_no_signal"]) == (1, 4, 0)
    assert len({t.group_id for t in batch}) == 1
    assert sorted(t.reward for t in batch) == [0.0, 0.0, 0.0, 1.0]


async def test_without_a_run_dir_the_run_folder_goes_under_relight_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELIGHT_RUNS", str(tmp_path / "scratch"))
    monkeypatch.chdir(tmp_path)
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(RecordingAlgorithm(upstream), batch_size=2, n_samples=1, console=Console(file=io.StringIO()))
        await trainer.afit(three_calls, [{"text": "a"}, {"text": "b"}])
    (run,) = (tmp_path / "scratch").iterdir()
    assert {"metrics.jsonl", "store.db", "summary.json"} <= {p.name for p in run.iterdir()}
    assert not (tmp_path / "runs").exists()
