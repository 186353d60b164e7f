"""Traces exported by a real OpenTelemetry SDK become retokenized transitions and SFT data.

The OTLP/HTTP exporters (protobuf and JSON) send a LangChain-style trace (a graph of nodes, one
tool call) and an Agents-SDK-style trace (a handoff; the second agent is shown an image its text
template cannot render) to the receiver; the same LangChain-style conversation traced in the
OpenInference and OpenLLMetry dialects must give the same transitions. Tokens are checked against
the tiny model's chat template, and the chat export is fed to relight-torch's SFT.
"""

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
pytest.importorskip("opentelemetry.exporter.otlp.json.http.trace_exporter")

from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as ProtobufExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer

import relight
from relight._internal.server import AsgiServer
from relight.cli import main
from relight.otlp import (
    ImportedRollout,
    ImportOptions,
    TemplateRetokenizer,
    add_reward,
    create_otlp_app,
    explain_imported,
)
from relight.records import Span, SpanKind, Transition
from relight.store import Store
from relight.transitions.jsonl import read_jsonl
from relight.transitions.verdicts import Note, Reason
from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.sft import SFT, conversation_samples, read_conversations, transition_samples
from relight_torch.models.tiny import tiny_engine, tiny_tokenizer

SYSTEM = "You answer questions about the weather."
QUESTION = "What is the weather in Paris?"
ARGUMENTS = {"city": "Paris"}
RESULT = "18 C and sunny"
ANSWER = "It is 18 C and sunny in Paris."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Look up the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": json.dumps(ARGUMENTS)}}
FIRST_PROMPT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
FIRST_ANSWER = {"role": "assistant", "content": "", "tool_calls": [CALL]}
SECOND_PROMPT = [*FIRST_PROMPT, FIRST_ANSWER, {"role": "tool", "content": RESULT, "tool_call_id": "call_1"}]
SECOND_ANSWER = {"role": "assistant", "content": ANSWER}
OPTIONS = ImportOptions(reward_attribute="app.reward", reward_event="feedback", group_attribute="app.task")

Attributes = dict[str, Any]


# -- the same LangChain-style run (a researcher node calls a tool, a writer answers) in three dialects --------


def _gen_ai_call(first: bool) -> Attributes:
    def text(content: str) -> dict[str, str]:
        return {"type": "text", "content": content}

    tool_call = {"type": "tool_call", "id": "call_1", "name": "search", "arguments": ARGUMENTS}
    inputs: list[dict[str, Any]] = [{"role": "user", "parts": [text(QUESTION)]}]
    if first:
        outputs = [{"role": "assistant", "parts": [tool_call], "finish_reason": "tool_calls"}]
    else:
        inputs += [
            {"role": "assistant", "parts": [tool_call]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": RESULT}]},
        ]
        outputs = [{"role": "assistant", "parts": [text(ANSWER)], "finish_reason": "stop"}]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.system_instructions": json.dumps([text(SYSTEM)]),
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps(outputs),
        "gen_ai.tool.definitions": json.dumps(TOOLS),
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 8,
    }


def _openinference_call(first: bool) -> Attributes:
    attributes: Attributes = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o"}
    attributes["llm.tools.0.tool.json_schema"] = json.dumps(TOOLS[0])

    def message(prefix: str, entry: Mapping[str, Any]) -> None:
        attributes[f"{prefix}.message.role"] = entry["role"]
        if entry.get("content"):
            attributes[f"{prefix}.message.content"] = entry["content"]
        if entry.get("tool_call_id"):
            attributes[f"{prefix}.message.tool_call_id"] = entry["tool_call_id"]
        for number, call in enumerate(entry.get("tool_calls", [])):
            attributes[f"{prefix}.message.tool_calls.{number}.tool_call.id"] = call["id"]
            attributes[f"{prefix}.message.tool_calls.{number}.tool_call.function.name"] = call["function"]["name"]
            attributes[f"{prefix}.message.tool_calls.{number}.tool_call.function.arguments"] = call["function"][
                "arguments"
            ]

    for number, entry in enumerate(FIRST_PROMPT if first else SECOND_PROMPT):
        message(f"llm.input_messages.{number}", entry)
    message("llm.output_messages.0", FIRST_ANSWER if first else SECOND_ANSWER)
    return attributes


def _openllmetry_call(first: bool) -> Attributes:
    attributes: Attributes = {"llm.request.type": "chat", "gen_ai.request.model": "gpt-4o"}
    function = TOOLS[0]["function"]
    attributes["llm.request.functions.0.name"] = function["name"]
    attributes["llm.request.functions.0.description"] = function["description"]
    attributes["llm.request.functions.0.parameters"] = json.dumps(function["parameters"])

    def message(prefix: str, entry: Mapping[str, Any]) -> None:
        attributes[f"{prefix}.role"] = entry["role"]
        if entry.get("content"):
            attributes[f"{prefix}.content"] = entry["content"]
        if entry.get("tool_call_id"):
            attributes[f"{prefix}.tool_call_id"] = entry["tool_call_id"]
        for number, call in enumerate(entry.get("tool_calls", [])):
            attributes[f"{prefix}.tool_calls.{number}.id"] = call["id"]
            attributes[f"{prefix}.tool_calls.{number}.name"] = call["function"]["name"]
            attributes[f"{prefix}.tool_calls.{number}.arguments"] = call["function"]["arguments"]

    for number, entry in enumerate(FIRST_PROMPT if first else SECOND_PROMPT):
        message(f"gen_ai.prompt.{number}", entry)
    message("gen_ai.completion.0", FIRST_ANSWER if first else SECOND_ANSWER)
    attributes["gen_ai.completion.0.finish_reason"] = "tool_calls" if first else "stop"
    return attributes


DIALECTS: dict[str, dict[str, Callable[..., Attributes]]] = {
    "gen_ai": {
        "root": lambda: {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "LangGraph"},
        "node": lambda name: {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
        "tool": lambda: {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
        "call": _gen_ai_call,
    },
    "openinference": {
        "root": lambda: {"openinference.span.kind": "CHAIN"},
        "node": lambda name: {"openinference.span.kind": "CHAIN", "metadata": json.dumps({"langgraph_node": name})},
        "tool": lambda: {"openinference.span.kind": "TOOL", "tool.name": "search"},
        "call": _openinference_call,
    },
    "openllmetry": {
        "root": lambda: {"traceloop.span.kind": "workflow", "traceloop.entity.name": "LangGraph"},
        "node": lambda name: {"traceloop.span.kind": "task", "traceloop.entity.name": name},
        "tool": lambda: {"traceloop.span.kind": "tool", "traceloop.entity.name": "search"},
        "call": _openllmetry_call,
    },
}


def langchain_style(tracer: Tracer, dialect: str) -> str:
    """A LangGraph run: researcher (a call that asks for a tool, the tool), writer (a call that answers)."""
    parts = DIALECTS[dialect]
    with tracer.start_as_current_span(
        "LangGraph", attributes={**parts["root"](), "app.reward": 1.0, "app.task": "weather"}
    ) as root:
        with tracer.start_as_current_span("researcher", attributes=parts["node"]("researcher")):
            with tracer.start_as_current_span("chat gpt-4o", attributes=parts["call"](True)):
                pass
            with tracer.start_as_current_span("execute_tool search", attributes=parts["tool"]()):
                pass
        answer = {**parts["call"](False), "app.custom": "x"}
        with (
            tracer.start_as_current_span("writer", attributes=parts["node"]("writer")),
            tracer.start_as_current_span("chat gpt-4o", attributes=answer),
        ):
            pass
        return format(root.get_span_context().trace_id, "032x")


IMAGE_QUESTION = "And what does this photo of Paris show?"


def agents_sdk_style(tracer: Tracer) -> str:
    """An Agents SDK run: Triage hands off to Weather, which is shown an image; the user rates the run 0.5.

    Triage's call is traced the older way (one span event per message), Weather's the current way.
    """
    handoff = {"id": "call_h", "type": "function", "function": {"name": "transfer_to_weather", "arguments": "{}"}}
    with tracer.start_as_current_span("Agent workflow", attributes={"app.task": "weather"}) as root:
        with (
            tracer.start_as_current_span(
                "invoke_agent Triage",
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Triage"},
            ),
            tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}) as call,
        ):
            call.add_event("gen_ai.system.message", {"content": "You route questions."})
            call.add_event("gen_ai.user.message", {"content": QUESTION})
            call.add_event(
                "gen_ai.choice",
                {
                    "message": json.dumps({"role": "assistant", "tool_calls": [handoff]}),
                    "finish_reason": "tool_calls",
                },
            )
            call.set_attribute("gen_ai.response.id", "resp_triage")
        with tracer.start_as_current_span(
            "invoke_agent Weather", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Weather"}
        ):
            image = {"type": "uri", "modality": "image", "uri": "https://example.com/paris.jpg"}
            inputs = [{"role": "user", "parts": [{"type": "text", "content": IMAGE_QUESTION}, image]}]
            outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "The Eiffel Tower."}]}]
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps(outputs),
                "gen_ai.response.id": "resp_weather",
            }
            with tracer.start_as_current_span("chat gpt-4o", attributes=attributes):
                pass
            with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}) as failed:
                failed.set_status(Status(StatusCode.ERROR, "rate limited"))
        root.add_event("feedback", {"score": 0.5})
        return format(root.get_span_context().trace_id, "032x")


# -- the receiver and the exporters ----------------------------------------------------------------------


@contextmanager
def receiver(path: Path) -> Iterator[tuple[AsgiServer, Store]]:
    store = relight.open_store(f"sqlite:///{path}")
    with AsgiServer(create_otlp_app(store, OPTIONS)) as server:
        try:
            yield server, store
        finally:
            server.call(store.close())


def export(server: AsgiServer, encoding: str, run: Callable[[Tracer], str]) -> str:
    """Trace ``run`` with a real SDK whose OTLP/HTTP exporter sends to the receiver; returns the trace id."""
    exporter_class = ProtobufExporter if encoding == "protobuf" else JsonExporter
    exporter = exporter_class(endpoint=f"{server.url}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    try:
        trace_id = run(provider.get_tracer("test"))
        assert provider.force_flush()
    finally:
        provider.shutdown()
    return trace_id


@pytest.fixture(scope="module")
def retokenizer() -> TemplateRetokenizer:
    return TemplateRetokenizer(tiny_tokenizer())


def imported(
    server: AsgiServer,
    store: Store,
    retokenizer: TemplateRetokenizer,
    trace_id: str,
    builder: relight.TransitionBuilder | None = None,
) -> ImportedRollout:
    async def judge() -> ImportedRollout:
        (rollout,) = [r for r in await store.list_rollouts() if r.rollout_id == f"otlp-{trace_id}"]
        (result,) = await explain_imported(store, builder or relight.TransitionBuilder(), retokenizer, [rollout])
        return result

    return server.call(judge())


def expected_tokens(
    tokenizer: Any, prompt: list[dict[str, Any]], answer: dict[str, Any], tools: Any
) -> tuple[list[int], str]:
    """The prompt's ids as the template renders it, and the answer's text as the model must write it."""

    def renderable(message: dict[str, Any]) -> dict[str, Any]:
        calls = [
            {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
            for c in message.get("tool_calls", [])
        ]
        return {**message, "tool_calls": calls} if calls else message

    history = [renderable(m) for m in prompt]
    text = tokenizer.apply_chat_template(history, tools=tools, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template([*history, renderable(answer)], tools=tools, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False), whole[len(text) :]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_exported_traces_become_rollouts_and_retokenized_transitions(
    tmp_path: Path, encoding: str, retokenizer: TemplateRetokenizer
) -> None:
    tokenizer = retokenizer.tokenizer
    with receiver(tmp_path / "traces.db") as (server, store):
        langchain = export(server, encoding, lambda tracer: langchain_style(tracer, "gen_ai"))
        agents = export(server, encoding, agents_sdk_style)

        # Stored: every span of both traces, one rollout each, every original attribute kept.
        rollouts = server.call(store.list_rollouts())
        assert sorted(r.rollout_id for r in rollouts) == sorted([f"otlp-{langchain}", f"otlp-{agents}"])
        assert all(r.status is relight.RolloutStatus.SUCCEEDED for r in rollouts)
        spans: list[Span] = server.call(store.query_spans(f"otlp-{langchain}"))
        by_name = {span.name: span for span in spans if span.kind is not SpanKind.LLM}
        assert set(by_name) == {"LangGraph", "researcher", "writer", "execute_tool search", "reward"}
        assert by_name["execute_tool search"].kind is SpanKind.TOOL
        assert by_name["reward"].attributes["relight.reward"] == 1.0
        calls = sorted((s for s in spans if s.kind is SpanKind.LLM), key=lambda s: s.start_time)
        assert len(calls) == 2
        assert calls[1].attributes["app.custom"] == "x"
        resource = calls[1].attributes["relight.otlp.resource"]
        assert isinstance(resource, dict)
        assert resource["service.name"] == "weather-agent"
        assert (
            calls[0].attributes["relight.original.gen_ai.input.messages"] == _gen_ai_call(True)["gen_ai.input.messages"]
        )
        assert calls[0].attributes["relight.import.missing"] == [
            "token_ids",
            "logprobs",
            "policy_version",
            "response_id",
        ]
        assert json.loads(str(calls[1].attributes["gen_ai.input.messages"])) == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        ]

        # Transitions: retokenized with the policy's template, roles from the nodes, the trace's reward.
        result = imported(server, store, retokenizer, langchain)
        transitions = sorted(result.transitions, key=lambda t: t.step)
        assert [t.role for t in transitions] == ["researcher", "writer"]
        assert all(t.retokenized and t.reward == 1.0 and t.response_logprobs is None for t in transitions)
        assert all(t.metadata["retokenized_exact"] is True for t in transitions)
        for transition, prompt, answer in zip(
            transitions, [FIRST_PROMPT, SECOND_PROMPT], [FIRST_ANSWER, SECOND_ANSWER], strict=True
        ):
            prompt_ids, answer_text = expected_tokens(tokenizer, prompt, answer, TOOLS)
            assert transition.prompt_token_ids == prompt_ids
            assert tokenizer.decode(transition.response_token_ids) == answer_text
        assert tokenizer.decode(transitions[1].response_token_ids) == ANSWER + "<|end|>"
        assert '<tool_call>{"name": "search", "arguments": {"city": "Paris"}}</tool_call>' in tokenizer.decode(
            transitions[0].response_token_ids
        )

        # The handoff trace: the image the template cannot render, and the handoff called with no tool
        # definitions in the trace, make inexact calls: left out with the reason, not dropped silently;
        # a builder told to keep them trains them, noted. The failed call is told.
        handed = imported(server, store, retokenizer, agents)
        assert handed.reward == 0.5
        left_out = {call.role: call for call in handed.verdict.calls if call.reason is Reason.INEXACT}
        assert set(left_out) == {"Triage", "Weather"}
        assert "tools_missing" in left_out["Triage"].detail
        assert "uri content a text template cannot render" in left_out["Weather"].detail
        handed = imported(server, store, retokenizer, agents, relight.TransitionBuilder(include_inexact=True))
        trained = {call.role: call for call in handed.verdict.calls if call.trained}
        assert set(trained) == {"Triage", "Weather"}
        weather = trained["Weather"].transition
        assert weather is not None
        assert weather.metadata["retokenized_exact"] is False
        assert "uri content a text template cannot render" in str(weather.metadata["retokenized_mismatch"])
        assert weather.metadata["retokenized_reasons"] == ["content_not_text"]
        assert Note.INEXACT in trained["Weather"].notes
        triage = trained["Triage"].transition
        assert triage is not None
        assert triage.metadata["retokenized_reasons"] == ["tools_missing"]
        assert triage.reward == weather.reward == 0.5
        assert (
            tokenizer.decode(triage.prompt_token_ids)
            == "<|system|>You route questions.<|end|><|user|>" + QUESTION + "<|end|><|assistant|>"
        )
        (failed,) = [call for call in handed.verdict.calls if not call.trained]
        assert failed.reason is Reason.FAILED_CALL
        assert failed.detail == "rate limited"


def test_the_three_dialects_give_the_same_transitions(tmp_path: Path, retokenizer: TemplateRetokenizer) -> None:
    def essence(transition: Transition) -> tuple[object, ...]:
        return (
            transition.step,
            transition.role,
            transition.prompt_token_ids,
            transition.response_token_ids,
            transition.reward,
            transition.metadata["retokenized_exact"],
        )

    found: dict[str, list[tuple[object, ...]]] = {}
    with receiver(tmp_path / "traces.db") as (server, store):
        for dialect in DIALECTS:
            trace_id = export(server, "protobuf", lambda tracer, d=dialect: langchain_style(tracer, d))
            result = imported(server, store, retokenizer, trace_id)
            found[dialect] = sorted(essence(t) for t in result.transitions)
            spans = server.call(store.query_spans(f"otlp-{trace_id}"))
            assert {s.attributes["relight.import.dialect"] for s in spans if s.kind is SpanKind.LLM} == {dialect}
    assert len(found["gen_ai"]) == 2
    assert found["openinference"] == found["gen_ai"]
    assert found["openllmetry"] == found["gen_ai"]


def test_traces_become_sft_data_that_relight_torch_trains_on(
    tmp_path: Path, retokenizer: TemplateRetokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "traces.db"
    with receiver(database) as (server, _):
        export(server, "protobuf", lambda tracer: langchain_style(tracer, "openllmetry"))
        unrewarded = export(server, "json", agents_sdk_style)
    store_url = f"sqlite:///{database}"

    # Only the writer's call, and only calls of rollouts rewarded at least 1: the agents trace (0.5) is left out.
    sft_path = tmp_path / "sft.jsonl"
    chat = ["export", "--store", store_url, "--format", "chat"]
    assert main([*chat, "--role", "^writer$", "--min-reward", "1", "-o", str(sft_path)]) == 0
    (record,) = [json.loads(line) for line in sft_path.read_text().splitlines()]
    context = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in SECOND_PROMPT]
    assert record["messages"] == [*context, SECOND_ANSWER]
    assert record["role"] == "writer"
    assert record["reward"] == 1.0
    assert record["tools"] == TOOLS

    # The agents trace's calls are inexact (an image, a handoff without tool definitions): left out and counted,
    # unless asked for. A reward given afterwards (a reward function's verdict) reaches the unrewarded call's export.
    all_path = tmp_path / "all.jsonl"
    capsys.readouterr()
    assert main(["export", "--store", store_url, "--format", "chat", "-o", str(all_path)]) == 0
    said = capsys.readouterr().err
    assert "wrote 2 conversation(s); calls left out:" in said
    for reason in ("1 inexact (content_not_text)", "1 inexact (tools_missing)", "1 failed call"):
        assert reason in said
    chat = ["export", "--store", store_url, "--format", "chat", "--include-inexact"]
    assert main([*chat, "-o", str(all_path)]) == 0
    rewards = {json.loads(line)["role"]: json.loads(line)["reward"] for line in all_path.read_text().splitlines()}
    assert rewards == {"researcher": 1.0, "writer": 1.0, "Triage": 0.5, "Weather": 0.5}

    async def reward_again() -> None:
        opened = relight.open_store(store_url)
        try:
            await add_reward(opened, f"otlp-{unrewarded}", 0.25, name="judge")
        finally:
            await opened.close()

    asyncio.run(reward_again())
    assert main([*chat, "--role", "Weather", "-o", str(all_path)]) == 0
    assert json.loads(all_path.read_text())["reward"] == 0.75

    # relight-torch's SFT reads the file as it reads any conversations, and learns from it.
    conversations = read_conversations(sft_path)
    with tiny_engine(seed=0) as engine:
        samples = conversation_samples(engine.tokenizer, conversations)
        assert len(samples) == 1
        assert engine.tokenizer.decode(samples[0].response_ids) == ANSWER + "<|end|>"
        sft = SFT(engine, lr=1e-2)
        before = sft.loss(samples)
        sft.fit(samples, steps=3, batch_size=1, warmup=1)
        assert sft.loss(samples) < before

    # Transitions need token ids: without a tokenizer none are written, and the command says what to pass.
    capsys.readouterr()
    assert main(["export", "--store", store_url, "-o", str(tmp_path / "none.jsonl")]) == 0
    said = capsys.readouterr().err
    assert "wrote 0 transition(s); calls left out: 2 no token ids, 2 inexact tokens, 1 failed call" in said
    assert "pass --tokenizer MODEL to retokenize them" in said

    # Transitions with token ids, retokenized by the tokenizer saved as a model folder.
    folder = tmp_path / "tokenizer"
    retokenizer.tokenizer.save_pretrained(folder)
    transitions_path = tmp_path / "transitions.jsonl"
    retokenize = ["export", "--store", store_url, "--tokenizer", str(folder), "-o", str(transitions_path)]
    assert main(retokenize) == 0
    assert sorted(t.role or "" for t in read_jsonl(transitions_path)) == ["researcher", "writer"]
    assert main([*retokenize, "--include-inexact"]) == 0
    transitions = read_jsonl(transitions_path)
    assert sorted(t.role or "" for t in transitions) == ["Triage", "Weather", "researcher", "writer"]
    assert all(t.retokenized and t.response_logprobs is None for t in transitions)
    assert {t.group_id for t in transitions} == {"weather"}  # both traces ran the same task (app.task)

    # relight-torch learns from the logged transitions offline: rejection-sampling SFT on the rewarded ones,
    # and GRPO, whose missing behaviour logprobs the policy recomputes.
    with tiny_engine(seed=0) as engine:
        assert len(transition_samples(transitions, min_reward=1.0)) == 2
        grpo = GRPO(engine, lr=1e-3)
        metrics = asyncio.run(grpo.update(transitions))
        assert "update_skipped" not in metrics
        assert metrics["samples_without_logprobs"] == 4
        assert grpo.policy_version == 1
