"""Nothing the receiver accepts is dropped: spans before their trace's first LLM call, events before or after their
span, a session named late, across a restart of the receiver; what it refuses is named and counted.

Bodies are built with OTLP's own protobuf types, as the exporters build them.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("opentelemetry.proto.collector.logs.v1.logs_service_pb2")

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList

from relight import open_store
from relight._internal.server import AsgiServer
from relight.otlp import ImportOptions, create_otlp_app
from relight.otlp.imported_calls import prepare_spans
from relight.records import RolloutStatus, SpanKind
from relight.store import Store

TRACE = "5b8efff798038103d269b633813fc60c"
CALL = "00f067aa0ba902b7"
PROTOBUF = {"content-type": "application/x-protobuf"}


def _value(value: object) -> AnyValue:
    if isinstance(value, dict):
        pairs = [KeyValue(key=k, value=_value(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _spans(*spans: tuple[str, str, dict[str, object]], trace: str = TRACE) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for number, (span_id, name, attributes) in enumerate(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id, span.name = bytes.fromhex(trace), bytes.fromhex(span_id), name
        span.start_time_unix_nano, span.end_time_unix_nano = 1_000 + number, 2_000 + number
        span.attributes.extend(KeyValue(key=k, value=_value(v)) for k, v in attributes.items())
    return request.SerializeToString()


def _events(*events: tuple[str, dict[str, object]], span: str | None = CALL, trace: str | None = TRACE) -> bytes:
    """GenAI events as openai-v2 logs them by default: one log record per message, its text in the body."""
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for number, (name, body) in enumerate(events):
        record = scope.log_records.add()
        record.event_name, record.observed_time_unix_nano = name, 1_500 + number
        if trace is not None and span is not None:
            record.trace_id, record.span_id = bytes.fromhex(trace), bytes.fromhex(span)
        record.body.CopyFrom(_value(body))
        record.attributes.append(KeyValue(key="gen_ai.system", value=_value("openai")))
    return request.SerializeToString()


LLM = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.system": "openai"}
EVENTS = (
    ("gen_ai.system.message", {"content": "You answer."}),
    ("gen_ai.user.message", {"content": "Hi"}),
    ("gen_ai.choice", {"index": 0.0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello"}}),
)


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'traces.db'}"


def receiver(url: str, options: ImportOptions | None = None) -> tuple[AsgiServer, Store]:
    store = open_store(url)
    return AsgiServer(create_otlp_app(store, options)).__enter__(), store


def stop(server: AsgiServer, store: Store) -> None:
    server.call(store.close())
    server.__exit__(None, None, None)


@pytest.fixture
def served(database: str) -> Iterator[tuple[AsgiServer, Store]]:
    server, store = receiver(database)
    yield server, store
    stop(server, store)


def _post(server: AsgiServer, path: str, body: bytes) -> httpx.Response:
    response = httpx.post(f"{server.url}{path}", content=body, headers=PROTOBUF)
    assert response.status_code == 200, response.content
    return response


def _call_messages(server: AsgiServer, store: Store, rollout_id: str) -> tuple[object, object]:
    spans = prepare_spans(server.call(store.query_spans(rollout_id)), None)
    (call,) = [span for span in spans if span.kind is SpanKind.LLM]
    inputs, outputs = call.attributes.get("gen_ai.input.messages"), call.attributes.get("gen_ai.output.messages")
    return json.loads(str(inputs)) if inputs else None, json.loads(str(outputs)) if outputs else None


def test_spans_before_the_first_llm_call_wait_in_the_store_across_a_restart(database: str) -> None:
    server, store = receiver(database, ImportOptions(reward_attribute="app.reward"))
    _post(server, "/v1/traces", _spans(("1111111111111111", "retrieve", {"openinference.span.kind": "RETRIEVER"})))
    (waiting,) = server.call(store.list_rollouts())
    assert (waiting.rollout_id, waiting.status) == (f"otlp-{TRACE}", RolloutStatus.RUNNING)
    stop(server, store)

    server, store = receiver(database, ImportOptions(reward_attribute="app.reward"))
    _post(server, "/v1/traces", _spans((CALL, "chat", LLM), ("2222222222222222", "agent", {"app.reward": 1.0})))
    (rollout,) = server.call(store.list_rollouts())
    assert (rollout.rollout_id, rollout.status) == (f"otlp-{TRACE}", RolloutStatus.SUCCEEDED)
    stored = {span.span_id for span in server.call(store.query_spans(rollout.rollout_id))}
    assert stored == {"1111111111111111", CALL, "2222222222222222", "2222222222222222-reward-0"}
    stop(server, store)


@pytest.mark.parametrize("events_first", [True, False])
def test_genai_events_join_their_call_whichever_arrives_first(database: str, events_first: bool) -> None:
    exports = [("/v1/logs", _events(*EVENTS)), ("/v1/traces", _spans((CALL, "chat", LLM)))]
    for path, body in exports if events_first else reversed(exports):
        server, store = receiver(database)  # each export to a receiver started afresh
        answer = _post(server, path, body)
        if path == "/v1/logs":
            assert not ExportLogsServiceResponse.FromString(answer.content).HasField("partial_success")
        stop(server, store)
    server, store = receiver(database)
    (rollout,) = server.call(store.list_rollouts())
    assert rollout.status is RolloutStatus.SUCCEEDED
    assert _call_messages(server, store, rollout.rollout_id) == (
        [{"role": "system", "content": "You answer."}, {"role": "user", "content": "Hi"}],
        [{"role": "assistant", "content": "Hello"}],
    )
    stop(server, store)


def test_log_records_that_belong_to_no_call_are_refused_by_name_and_counted(
    served: tuple[AsgiServer, Store],
) -> None:
    server, store = served
    request = ExportLogsServiceRequest()
    for body in (_events(EVENTS[0], span=None), _events(("app.started", {"content": "x"})), _events(EVENTS[1])):
        request.MergeFromString(body)
    answer = ExportLogsServiceResponse.FromString(_post(server, "/v1/logs", request.SerializeToString()).content)
    assert answer.partial_success.rejected_log_records == 2
    message = answer.partial_success.error_message
    assert (
        "1 log record(s) without a trace and span id (log record resourceLogs[0].scopeLogs[0].logRecords[0])" in message
    )
    assert "no GenAI event" in message
    assert "logRecords[0] (app.started)" in message
    stats = httpx.get(f"{server.url}/stats").json()
    assert stats["log_records"] == 1
    assert sum(stats["refused"].values()) == 2
    (waiting,) = server.call(store.list_rollouts())
    assert [span.name for span in server.call(store.query_spans(waiting.rollout_id))] == ["gen_ai.user.message"]


def test_a_trace_that_names_its_session_late_moves_into_the_session(database: str) -> None:
    options = ImportOptions(session_attribute="session.id")
    server, store = receiver(database, options)
    _post(server, "/v1/traces", _spans(("1111111111111111", "retrieve", {})))  # no session named yet
    _post(server, "/v1/traces", _spans((CALL, "chat", {**LLM, "session.id": "s7"})))
    stop(server, store)
    server, store = receiver(database, options)  # a later span of the trace, to a receiver started afresh
    _post(server, "/v1/traces", _spans(("2222222222222222", "agent", {})))
    moved, session = server.call(store.list_rollouts())
    assert (moved.rollout_id, moved.status, moved.metadata["moved_to"]) == (
        f"otlp-{TRACE}",
        RolloutStatus.CANCELLED,
        "otlp-session-s7",
    )
    assert (session.rollout_id, session.status, session.metadata["trace_ids"]) == (
        "otlp-session-s7",
        RolloutStatus.SUCCEEDED,
        [TRACE],
    )
    held = [span.span_id for span in server.call(store.query_spans(session.rollout_id))]
    assert held == ["1111111111111111", CALL, "2222222222222222"]
    stop(server, store)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_metrics_are_answered_as_otlp_expects_and_counted(served: tuple[AsgiServer, Store], encoding: str) -> None:
    server, _ = served
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "gen_ai.client.token.usage"
    for value in (3, 5):
        metric.sum.data_points.add().as_int = value
    if encoding == "json":
        from google.protobuf import json_format

        body, headers = json_format.MessageToJson(request).encode(), {"content-type": "application/json"}
    else:
        body, headers = request.SerializeToString(), PROTOBUF
    response = httpx.post(f"{server.url}/v1/metrics", content=body, headers=headers)
    assert response.status_code == 200
    if encoding == "json":
        assert response.json() == {}
    else:
        assert ExportMetricsServiceResponse.FromString(response.content) == ExportMetricsServiceResponse()
    assert httpx.get(f"{server.url}/stats").json()["metric_points"] == 2
