"""The coding example: Codex CLI and Claude Code, from npm and unchanged, complete rollouts in dev mode.

Each CLI runs in the harness (a fresh folder, its documented base-URL/key/model settings, a network
namespace where only the gateway can be reached, checked) against the scripted model, which answers
through the CLI's own file tool; the reward is the fraction of the task's tests that pass.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import coding_agent
import coding_tasks
import pytest
from rich.console import Console

from relight import semconv
from relight.harness import CliHarness, HarnessResult
from relight.records import Span, SpanKind
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight.training.trainer import Trainer
from relight_testing.examples import example_file, run_example


def _namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_each_tasks_solution_passes_every_test_and_its_starting_code_does_not() -> None:
    for task in coding_tasks.load("all"):
        solution = coding_tasks.SOLUTIONS[task["id"]]
        assert all(coding_tasks.run_tests(solution, task).values()), task["id"]
        assert not all(coding_tasks.run_tests(task["files"]["solution.py"], task).values()), task["id"]
    assert len(coding_tasks.load("train")) + len(coding_tasks.load("test")) == len(coding_tasks.TASKS)


def test_a_solution_that_hangs_scores_what_it_passed_and_edited_tests_count_for_nothing() -> None:
    task = coding_tasks.load("all")[0]
    assert coding_tasks.run_tests("import time\ntime.sleep(60)\n", task, timeout=2) == dict.fromkeys(
        [name for name, _ in coding_tasks.TASKS[0]["tests"]], False
    )
    cheat = HarnessResult(0, False, "", "", workdir=None, files={"solution.py": "x = 1", "test_solution.py": ""})  # type: ignore[arg-type]
    assert coding_tasks.reward(task, cheat) == 0.0


@pytest.mark.parametrize("cli", ["codex", "claude"])
async def test_the_cli_completes_rollouts_in_dev_mode_through_the_gateway_only(cli: coding_agent.CliName) -> None:
    if not coding_agent.installed(cli):
        pytest.skip(f"{cli} is not installed: `make clis` installs it from npm (npm could not be reached?)")
    if not _namespaces_work():
        pytest.skip("unshare --net cannot make a network namespace on this machine")
    results: list[HarnessResult] = []

    def reward(task: Any, result: HarnessResult) -> float:
        results.append(result)
        return coding_tasks.reward(task, result)

    harness = coding_agent.agent(cli, timeout=300)
    agent = CliHarness(harness.cli, prompt=coding_tasks.prompt, files=lambda t: t["files"], reward=reward, timeout=300)
    tasks = coding_tasks.load("all")[:2]
    store = InMemoryStore()
    async with ScriptedUpstream(coding_agent.scripted_model, model="relight-coder") as upstream:
        trainer = Trainer(store=store, max_attempts=1, console=Console(file=io.StringIO()))
        dev = await trainer.adev(agent, tasks, base_url=upstream.base_url, model="relight-coder", api_key="unused")

    # The CLI solved each task with its own file tool, and the tests say so.
    assert [result.reward for result in dev] == [1.0, 1.0], [r.stderr[-2000:] for r in results]
    written = sorted(result.files["solution.py"] for result in results)  # (rollouts end in any order)
    assert written == sorted(coding_tasks.SOLUTIONS[t["id"]] for t in tasks)
    assert all(result.exit_code == 0 for result in results)
    # Nothing but the gateway was reachable: checked inside each rollout's namespace before the CLI ran.
    assert [result.isolation for result in results] == [
        {"devices": ["lo"], "outside_probe": "192.0.2.1:80 -> ENETUNREACH", "isolated": True}
    ] * 2

    served = {tuple(reply.prompt_token_ids): reply for reply in upstream.served}
    for result in dev:
        spans = [s for s in await store.query_spans(result.rollout.rollout_id) if s.kind is SpanKind.LLM]
        assert result.failed_calls == 0
        assert len(spans) == result.calls >= 2
        # Every call recorded with the exact ids and logprobs the model sampled.
        for span in spans:
            reply = served[tuple(_ints(span, semconv.PROMPT_TOKEN_IDS))]
            assert _ints(span, semconv.RESPONSE_TOKEN_IDS) == reply.token_ids
            assert span.attributes[semconv.RESPONSE_LOGPROBS] == reply.logprobs
        # A tool round trip: the first call asked for a tool, a later one carries its result.
        first = json.loads(str(spans[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
        assert first[0]["tool_calls"]
        later = json.loads(str(spans[-1].attributes[semconv.GEN_AI_INPUT_MESSAGES]))
        assert any(message["role"] == "tool" for message in later)


def test_the_readme_command_runs_offline(tmp_path: Path) -> None:
    if not coding_agent.installed("codex"):
        pytest.skip("codex is not installed: `make clis` installs it from npm (npm could not be reached?)")
    if not _namespaces_work():
        pytest.skip("unshare --net cannot make a network namespace on this machine")
    rows = run_example(
        example_file("frameworks/coding_agent/coding_agent.py", near=__file__), "--tasks", "2", cwd=tmp_path
    )
    assert len(rows) == 2, rows
    # Each row: succeeded, reward 1.000, two calls (their exact ids are checked by the dev-mode tests above).
    assert all(re.search(r"succeeded\s+│\s+1\.000\s+│\s+2\s+│", row) for row in rows), rows


def _ints(span: Span, key: str) -> list[int]:
    value = span.attributes[key]
    assert isinstance(value, list)
    return [int(item) for item in value]  # pyright: ignore[reportArgumentType]


@pytest.mark.slow
def test_cpu_training_wires_codex_to_the_long_context_tiny_model(tmp_path: Path) -> None:
    """coding_train.py, one update: Codex's real prompts (past SmolLM2's 8,192 tokens) through the gateway into GRPO."""
    if not coding_agent.installed("codex"):
        pytest.skip("codex is not installed: `make clis` installs it from npm (npm could not be reached?)")
    if not _namespaces_work():
        pytest.skip("unshare --net cannot make a network namespace on this machine")
    import coding_train

    coding_train.main(["--cli", "codex", "--out", str(tmp_path / "run"), "--tasks", "1", "--samples", "2"])
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = next(line for line in lines if line.get("kind") == "train")
    assert (train["rollouts"], train["rollouts_failed"]) == (2, 0)
    assert train["transitions"] >= 2
    store = SqliteStore(tmp_path / "run" / "store.db")
    spans = [span for span in asyncio.run(_all_spans(store)) if span.kind is SpanKind.LLM]
    assert spans
    assert all(len(_ints(span, semconv.PROMPT_TOKEN_IDS)) > 8192 for span in spans)
    assert all(
        len(_ints(span, semconv.RESPONSE_TOKEN_IDS)) == len(span.attributes[semconv.RESPONSE_LOGPROBS])  # type: ignore[arg-type]
        for span in spans
    )
    # Each rollout's first call is forced to be a tool call (a model whose template knows no tools never
    # calls one): it starts a <tool_call> block naming one of the tools Codex offered. Whether the CLI could run
    # it depends on the random model closing its arguments within the 48-token budget, so the round trip
    # itself is the scripted test's (test_the_cli_completes_rollouts_in_dev_mode_through_the_gateway_only).
    offered = {str(tool["function"]["name"]) for span in spans for tool in _tools(span)}
    firsts = [span for span in spans if not any(m["role"] == "tool" for m in _messages(span))]
    assert firsts
    for span in firsts:
        (reply,) = json.loads(str(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
        text = reply.get("content") or json.dumps(reply.get("tool_calls"))
        assert any(f'"{name}"' in text for name in offered), text[:200]


def _messages(span: Span) -> list[dict[str, Any]]:
    return json.loads(str(span.attributes[semconv.GEN_AI_INPUT_MESSAGES]))


def _tools(span: Span) -> list[dict[str, Any]]:
    return json.loads(str(span.attributes.get(semconv.GEN_AI_TOOL_DEFINITIONS, "[]")))


async def _all_spans(store: SqliteStore) -> list[Span]:
    try:
        spans: list[Span] = []
        for rollout in await store.list_rollouts():
            spans += await store.query_spans(rollout.rollout_id)
        return spans
    finally:
        await store.close()
