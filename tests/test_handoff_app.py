"""A newcomer's two-agent app, told the truth: a triage agent hands off to a math agent with a calculator.

Written as the README says (``relight.instrument("openai_agents")``, the ``llm`` handle), run offline
against the scripted model, which hands off and calls the tool. Dev mode shows the roles, the tool
call and the handoff; ``fit`` with a role filter of ``math`` then trains nothing, because every reward
is equal and the update is skipped: the dashboard's API, ``relight show`` and the run folder must say
exactly that (triage calls "filtered role", math calls "update skipped", policy version 0 everywhere,
no checkpoint), and the handoff and tool spans must carry their arguments and results.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

import relight
from relight.dashboard import Dashboard
from relight.records import Mode, SpanKind, Transition
from relight.scripted import Reply, ScriptedUpstream, ScriptRequest, ToolCall
from relight.transitions.builder import TransitionBuilder
from relight.transitions.learning_signal import flat_groups, group_key
from relight.transitions.verdicts import Reason
from relight_testing.algorithms import RecordingAlgorithm

agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed (pip install openai-agents)")

TRIAGE = "You are triage. Hand every math question to the math agent."
MATH = "You are math. Work the sum out with the calculator, then answer with the number."
TASKS = [{"question": "What is 2+3?", "answer": "5"}, {"question": "What is 4+4?", "answer": "8"}]


def scripted_model(request: ScriptRequest) -> Reply | str:
    """Triage hands off; math calls the calculator on the question's sum, then answers with its result."""
    if "You are math" in request.system:
        asked = [m for m in request.messages if m.get("role") == "assistant" and m.get("tool_calls")]
        if asked and asked[-1]["tool_calls"][0]["function"]["name"] == "calculator" and request.tool_results:
            return f"The answer is {request.tool_results[-1]}."
        question = next(m["content"] for m in request.messages if m.get("role") == "user")
        expression = str(question).removeprefix("What is ").rstrip("?")
        return Reply(tool_calls=[ToolCall("calculator", {"expression": expression})])
    return Reply(tool_calls=[ToolCall("transfer_to_math", {})])


def calculator(expression: str) -> str:
    """Add up the whole numbers of ``expression`` (``2+3``)."""
    return str(sum(int(part) for part in expression.split("+")))


@relight.rollout
async def app(task: Mapping[str, Any], llm: relight.LLM) -> float:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        model = OpenAIChatCompletionsModel(model=llm.model, openai_client=client)
        math = Agent(name="math", instructions=MATH, model=model, tools=[function_tool(calculator)])
        triage = Agent(name="triage", instructions=TRIAGE, model=model, handoffs=[math])
        result = await Runner.run(triage, task["question"])
    return 1.0 if task["answer"] in str(result.final_output) else 0.0


class SkipsFlatUpdates(RecordingAlgorithm):
    """As GRPO: a group whose rewards are all equal is left out, and an update with none left changes nothing."""

    skips_flat_groups = True

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        self.batches.append(list(transitions))
        if flat_groups(transitions) == {group_key(t) for t in transitions}:
            return {"update_skipped": 1.0}
        self._version += 1
        return {"update_skipped": 0.0}


@pytest.fixture(scope="module")
def instrumented() -> Iterator[None]:
    relight.instrument("openai_agents")
    try:
        yield
    finally:
        relight.uninstrument("openai_agents")


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(scripted_model) as served:
        yield served


def test_dev_mode_shows_roles_the_tool_call_and_the_handoff(
    instrumented: None, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    output = io.StringIO()
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    trainer = relight.Trainer(store=url, console=Console(file=output, width=80))
    results = trainer.dev(app, TASKS, base_url=upstream.base_url, model=upstream.model, api_key="unused")
    for result in results:
        assert (result.reward, result.roles) == (1.0, {"triage": 1, "math": 2})
        assert [(tool.name, tool.role, tool.error) for tool in result.tools] == [("calculator", "math", None)]
        assert result.handoffs == [("triage", "math")]
    printed = output.getvalue()
    assert max(len(line) for line in printed.splitlines()) <= 80
    unwrapped = printed.replace("\n", "").replace(" ", "").replace("│", "")
    for result in results:
        assert result.rollout.rollout_id in unwrapped  # folded at 80 columns, never cut
    assert "triage→math" in unwrapped
    assert f"store:{url}".replace(" ", "") in unwrapped


@pytest.fixture(scope="module")
def trained(instrumented: None, upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    trainer = relight.Trainer(
        SkipsFlatUpdates(upstream),
        batch_size=2,
        n_samples=2,
        transitions=TransitionBuilder(roles=["math"]),
        run_dir=run,
        console=Console(file=io.StringIO()),
    )
    trainer.fit(app, TASKS)
    return run


def test_the_run_folder_says_version_0_and_holds_no_checkpoint(trained: Path) -> None:
    summary = json.loads((trained / "summary.json").read_text())
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert summary["policy_version"] == 0
    assert [row["policy_version"] for row in rows] == [0]
    assert rows[0]["update_skipped"] == 1.0
    assert not any((trained / "checkpoints").glob("step-*"))


async def test_the_dashboard_says_why_no_call_was_trained(trained: Path) -> None:
    store = relight.open_store(f"sqlite:///{trained / 'store.db'}")
    try:
        assert (await store.stats()).resources_versions == 1  # a skipped update publishes no version
        async with Dashboard(store, port=0) as dashboard, httpx.AsyncClient(base_url=dashboard.url) as http:
            await dashboard.catalog.refresh()
            overview = (await http.get("api/overview")).json()
            assert overview["roles"] == ["math"]  # the run's own filter, no flag given
            curves = (await http.get("api/curves")).json()["points"]
            assert [point["policy_version"] for point in curves] == [0]
            listed = (await http.get("api/rollouts", params={"mode": Mode.TRAIN.value})).json()["rows"]
            assert len(listed) == 4
            for row in listed:
                assert row["trained"] == 0
                assert row["reasons"] == {Reason.FILTERED_ROLE.value: 1, Reason.UPDATE_SKIPPED.value: 2}
                detail = (await http.get(f"api/rollouts/{row['rollout_id']}")).json()
                calls = [(call["role"], call["trained"], call["reason"]) for call in detail["calls"]]
                assert calls == [
                    ("triage", False, Reason.FILTERED_ROLE.value),
                    ("math", False, Reason.UPDATE_SKIPPED.value),
                    ("math", False, Reason.UPDATE_SKIPPED.value),
                ]
                assert {call["policy_version"] for call in detail["calls"]} == {0}
                spans = [span for attempt in detail["attempts"] for span in attempt["spans"]]
                (handoff,) = [span for span in spans if span["kind"] == SpanKind.HANDOFF.value]
                assert (handoff["handoff_from"], handoff["handoff_to"]) == ("triage", "math")
                (tool,) = [span for span in spans if span["kind"] == SpanKind.TOOL.value]
                assert json.loads(tool["arguments"])["expression"] in ("2+3", "4+4")
                assert tool["result"] in ("5", "8")
    finally:
        await store.close()


def test_show_and_export_say_the_same(trained: Path) -> None:
    url = f"sqlite:///{trained / 'store.db'}"

    async def first_train_rollout() -> str:
        store = relight.open_store(url)
        try:
            return (await store.list_rollouts(mode=Mode.TRAIN, limit=1))[0].rollout_id
        finally:
            await store.close()

    rollout_id = asyncio.run(first_train_rollout())
    command = [sys.executable, "-m", "relight.cli"]
    shown = subprocess.run(
        [*command, "show", rollout_id, "--store", url], capture_output=True, text=True, check=True, env=_wide()
    ).stdout
    assert "not trained: filtered role" in shown
    assert shown.count("not trained: update skipped") == 2
    assert "triage → math" in shown
    assert "arguments" in shown
    assert "result" in shown
    exported = subprocess.run(
        [*command, "export", "--store", url, "--mode", "train"], capture_output=True, text=True, check=True
    )
    assert "the run trained 0 of 12 call(s)" in exported.stderr
    assert "8 update skipped" in exported.stderr
    assert "4 filtered role" in exported.stderr


def _wide() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200"}
