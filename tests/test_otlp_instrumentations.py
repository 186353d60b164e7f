"""The real GenAI instrumentations, exporting to relight's OTLP receiver, give exact transitions or say why not.

Each library (the official ``opentelemetry-instrumentation-openai-v2`` in each of its content modes,
OpenInference's, OpenLLMetry's alone and through ``traceloop-sdk``) traces a small agent
(``tests/otlp_instrumented_app.py``) that calls relight's scripted model with the real ``openai``
client, in a process of its own, and exports with the real OTLP/HTTP exporters to the receiver.
Then, for each app: every span the SDK ended is stored; every call, retokenized with SmolLM2's
tokenizer by relight's one renderer, holds exactly the ids of the conversation the app sent (tools,
tool calls and tool results included), or is marked inexact with the reason the trace gives (a
tracer that records no tool definitions: ``tools_missing``); the chat export holds every exact call.
Traced without their text, calls say which text is missing and why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

import relight
from relight._internal.server import AsgiServer
from relight.chat import assistant_turn, normal_tools
from relight.cli import main
from relight.otlp import ImportOptions, TemplateRetokenizer, chat_records, create_otlp_app, explain_imported
from relight.records import RolloutStatus, Span
from relight.scripted import Reply, ScriptedUpstream, ScriptRequest, ToolCall
from relight.transitions.verdicts import Reason
from relight_testing import models as testing_models

smollm2_path = testing_models.smollm2_path
"""The SmolLM2 folder, whose tokenizer (a template that renders no tools) retokenizes the calls."""

APP = Path(__file__).with_name("otlp_instrumented_app.py")
EXPERIMENTAL = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@dataclass(frozen=True)
class Tracer:
    """One library as an app sets it up: its environment, where it puts a session id, what it records."""

    library: str
    environment: dict[str, str] = field(default_factory=dict[str, str])
    session_attribute: str = "session.id"
    records_tools: bool = True
    encoding: str = "protobuf"


def _openai_v2(mode: str, *, experimental: bool = True, encoding: str = "protobuf") -> Tracer:
    """The official instrumentation records no tool definitions, in any mode."""
    environment = {**(EXPERIMENTAL if experimental else {}), CONTENT: mode}
    return Tracer("openai-v2", environment, records_tools=False, encoding=encoding)


TRACERS = {
    "openai-v2 events": _openai_v2("true", experimental=False),
    "openai-v2 span_only": _openai_v2("span_only"),
    "openai-v2 event_only": _openai_v2("event_only", encoding="json"),
    "openai-v2 span_and_event": _openai_v2("span_and_event"),
    "openinference": Tracer("openinference"),
    "openllmetry": Tracer("openllmetry"),
    "traceloop-sdk": Tracer(
        "traceloop", {"TRACELOOP_TELEMETRY": "false"}, "traceloop.association.properties.session_id"
    ),
}
WITHOUT_TEXT = {
    "openai-v2 events without content": _openai_v2("false", experimental=False),
    "openai-v2 no_content": _openai_v2("no_content"),
}
APPS = {"chat": 1, "tool_loop": 2, "conversation": 3, "session": 2, "stream": 1, "retriever_first": 1}
"""Each app and how many model calls it makes."""


def weather(request: ScriptRequest) -> Reply | str:
    """The model: calls the search tool when offered it and not yet answered, else answers the last question."""
    if "search" in request.tool_names and not request.tool_results:
        return Reply(tool_calls=[ToolCall("search", {"city": "Paris"})])
    if request.tool_results:
        return f"It is {request.tool_results[-1]} in Paris."
    return f"About {request.last_user.lower().rstrip('?.')}: mild, 18 C."


@dataclass
class Traced:
    """One library's run: the store it was received into, what the app reports, the receiver's stats."""

    store_url: str
    store: relight.Store
    server: AsgiServer
    report: dict[str, Any]
    stats: dict[str, Any]
    stderr: str

    def rollouts(self, traces: list[str]) -> list[relight.Rollout]:
        """The rollouts holding any of ``traces``."""
        rollouts: list[relight.Rollout] = self.server.call(self.store.list_rollouts())
        return [r for r in rollouts if set(map(str, r.metadata.get("trace_ids") or [])) & set(traces)]  # type: ignore[arg-type]


class Runs:
    """Each library's run, made the first time a test asks for it: one process per library, for all its apps."""

    def __init__(self, upstream: ScriptedUpstream, folders: pytest.TempPathFactory) -> None:
        self.upstream = upstream
        self.folders = folders
        self.made: dict[str, Traced] = {}

    def of(self, name: str) -> Traced:
        if name not in self.made:
            self.made[name] = self._run(name, {**TRACERS, **WITHOUT_TEXT}[name])
        return self.made[name]

    def _run(self, name: str, tracer: Tracer) -> Traced:
        folder = self.folders.mktemp(name.replace(" ", "-"))
        store_url = f"sqlite:///{folder / 'traces.db'}"
        store = relight.open_store(store_url)
        options = ImportOptions(reward_attribute="app.reward", session_attribute=tracer.session_attribute)
        server = AsgiServer(create_otlp_app(store, options)).__enter__()
        done = subprocess.run(
            [sys.executable, str(APP), tracer.library, server.url, self.upstream.base_url, tracer.encoding],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": str(folder), **tracer.environment},
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        stats = httpx.get(f"{server.url}/stats").json()
        return Traced(store_url, store, server, json.loads(done.stdout.splitlines()[-1]), stats, done.stderr)

    def close(self) -> None:
        for run in self.made.values():
            run.server.call(run.store.close())
            run.server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    with ScriptedUpstream(weather) as upstream:
        made = Runs(upstream, tmp_path_factory)
        try:
            yield made
        finally:
            made.close()


@pytest.fixture(scope="module")
def retokenizer(smollm2_path: Path) -> TemplateRetokenizer:
    return TemplateRetokenizer.for_model(str(smollm2_path))


@pytest.mark.parametrize("app", list(APPS))
@pytest.mark.parametrize("name", list(TRACERS))
def test_a_traced_app_becomes_exact_transitions(
    name: str, app: str, runs: Runs, retokenizer: TemplateRetokenizer
) -> None:
    run = runs.of(name)
    tracer = TRACERS[name]
    reported = run.report[app]
    assert len(reported["calls"]) == APPS[app]
    assert "Failed to export" not in run.stderr  # each endpoint answered as OTLP expects: the exporters stay quiet
    assert run.stats["refused"] == {}

    # Every span the SDK ended is stored, in the one rollout of its trace (or session), which succeeded and
    # lists every trace it holds.
    (rollout,) = run.rollouts(reported["traces"])
    assert rollout.status is RolloutStatus.SUCCEEDED
    assert rollout.metadata["trace_ids"] == reported["traces"]
    if app == "session":
        assert rollout.rollout_id == "otlp-session-weather-session"
    spans: list[Span] = run.server.call(run.store.query_spans(rollout.rollout_id))
    assert set(reported["spans"]) <= {span.span_id for span in spans}

    # Each call: the ids of exactly what the app sent and got back, tools and tool calls included; a tracer
    # that records no tool definitions has its tool calls marked instead.
    (judged,) = run.server.call(explain_imported(run.store, relight.TransitionBuilder(), retokenizer, [rollout]))
    assert judged.reward == len(reported["traces"])  # each trace's root holds a reward of 1
    calls = sorted(judged.verdict.calls, key=lambda call: call.span.start_time)
    assert len(calls) == APPS[app]
    tokenizer = retokenizer.tokenizer
    for call, sent in zip(calls, reported["calls"], strict=True):
        if sent["tools"] and not tracer.records_tools:
            assert call.reason is Reason.INEXACT, call.detail
            assert call.detail.startswith("tools_missing:")
            continue
        assert call.trained, f"{call.reason}: {call.detail}"
        assert call.transition is not None
        prompt, response = assistant_turn(tokenizer, sent["messages"], sent["answer"], tools=sent["tools"])
        assert call.transition.prompt_token_ids == prompt
        assert call.transition.response_token_ids == response
        assert call.transition.metadata["retokenized_exact"] is True
    if app == "tool_loop" and tracer.records_tools:
        first, second = (call.transition for call in calls)
        assert first is not None
        assert second is not None
        assert '"name": "search", "description": "Look up the weather"' in tokenizer.decode(first.prompt_token_ids)
        called = '<tool_call>{"name": "search", "arguments": {"city": "Paris"}}</tool_call>'
        assert called in tokenizer.decode(first.response_token_ids)
        assert called in tokenizer.decode(second.prompt_token_ids)
        assert "18 C and sunny" in tokenizer.decode(second.prompt_token_ids)

    # The chat export holds every exact call, as the app sent it; the others are counted.
    chats = chat_records([judged])
    exact = [sent for sent in reported["calls"] if tracer.records_tools or not sent["tools"]]
    assert len(chats.records) == len(exact)
    for record, sent in zip(chats.records, exact, strict=True):
        assert [m["role"] for m in record["messages"]] == [*(m["role"] for m in sent["messages"]), "assistant"]
        assert record["messages"][-1]["content"] == (sent["answer"]["content"] or "")
        assert record.get("tools", []) == normal_tools(sent["tools"])  # one shape, whichever the tracer wrote
    assert sum(chats.skipped.values()) == len(reported["calls"]) - len(exact)


@pytest.mark.parametrize(
    ("name", "missing", "cause"),
    [
        (
            "openai-v2 events without content",
            "no text for input message 0 (system), input message 1 (user), the answer",
            "its tracer recorded these messages without their text: content capture is off",
        ),
        (
            "openai-v2 no_content",
            "the trace holds no request and answer messages",
            "or it sends messages as OTLP log events and none reached this receiver's /v1/logs",
        ),
    ],
)
def test_calls_traced_without_their_text_say_which_text_is_missing_and_why(
    name: str, missing: str, cause: str, runs: Runs, smollm2_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs.of(name)
    calls = sum(len(entry["calls"]) for entry in run.report.values())
    out = Path(run.store_url.removeprefix("sqlite:///")).parent

    capsys.readouterr()
    assert main(["export", "--store", run.store_url, "--tokenizer", str(smollm2_path), "-o", str(out / "t")]) == 0
    said = capsys.readouterr().err
    assert f"wrote 0 transition(s); calls left out: {calls} inexact tokens" in said
    assert f"inexact: text_missing: {missing}: " in said
    assert cause in said
    assert "retokenize" not in said

    assert main(["export", "--store", run.store_url, "--format", "chat", "-o", str(out / "c")]) == 0
    said = capsys.readouterr().err
    left_out = re.findall(r"(\d+) inexact \(([^)]*)\)", said.splitlines()[0])
    assert said.startswith("wrote 0 conversation(s); calls left out: ")
    assert all("text_missing" in reasons for _, reasons in left_out)
    assert sum(int(count) for count, _ in left_out) == calls
    assert cause in said

    (rollout,) = run.rollouts(run.report["chat"]["traces"])
    assert main(["show", rollout.rollout_id, "--store", run.store_url]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"not trained: inexact tokens text_missing: {missing}" in shown
    assert cause in shown


@pytest.mark.parametrize("name", list(TRACERS))
def test_relight_verify_finds_each_librarys_store_whole(
    name: str, runs: Runs, smollm2_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every call re-checked with the tokenizer; what a tracer did not record is a notice, never a problem."""
    run = runs.of(name)
    capsys.readouterr()
    status = main(["verify", "--store", run.store_url, "--tokenizer", str(smollm2_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (status, report["problems"]) == (0, {})
    calls = sum(len(entry["calls"]) for entry in run.report.values())
    rechecked = report["checked"]["imported_calls_rechecked"]
    unrenderable = report["notices"].get("imported_not_retokenizable", {}).get("count", 0)
    assert rechecked + unrenderable == calls
