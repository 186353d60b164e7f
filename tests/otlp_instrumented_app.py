"""A small agent traced by a real GenAI instrumentation and exported over OTLP/HTTP; one process per library.

    python tests/otlp_instrumented_app.py LIBRARY ENDPOINT BASE_URL [ENCODING]

``LIBRARY`` is ``openai-v2`` (its content mode from the environment, as its docs set it),
``openinference``, ``openllmetry`` or ``traceloop``; ``ENDPOINT`` the receiver's base URL
(``http://127.0.0.1:PORT``); ``BASE_URL`` the OpenAI-compatible model's; ``ENCODING`` the OTLP exporters'
(``protobuf``, the default, or ``json``; traceloop-sdk's are protobuf). Each library is set up as
its own documentation does: OpenInference with a ``SimpleSpanProcessor`` (its README), the others
with the SDK's batching processors, traceloop-sdk through ``Traceloop.init``. The instrumentors patch
the ``openai`` module for the whole process, which is why each library runs in a process of its own
(``tests/test_otlp_instrumentations.py``).

The apps: one chat, a tool loop, a three-turn conversation, a session of two traces, one streamed
call, and a retriever span that ends (and is exported) before the model call. Prints one JSON
object: per app, its trace ids, the span ids the SDK ended, and every call as the app made it (the
messages and tools it sent, the message it got back).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import openai
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

SYSTEM = "You answer questions about the weather."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Look up the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
SESSION_ATTRIBUTE = {"openinference": "session.id", "traceloop": "traceloop.association.properties.session_id"}
"""The attribute each library puts a session id in (the others: the app's own ``session.id`` on its root span)."""
APPS = ("chat", "tool_loop", "conversation", "session", "stream", "retriever_first")


class _Ended(SpanProcessor):
    """Remembers every span the SDK ended, by trace: what the exporter was handed."""

    def __init__(self) -> None:
        self.spans: dict[str, list[str]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        assert context is not None
        self.spans.setdefault(format(context.trace_id, "032x"), []).append(format(context.span_id, "016x"))


class App:
    """The agent: calls the model through the real ``openai`` client, and records what it sent and got."""

    def __init__(self, library: str, client: openai.OpenAI, flush: Callable[[], None]) -> None:
        self.library = library
        self.client = client
        self.flush = flush
        self.tracer = trace.get_tracer("weather-app")
        self.calls: list[dict[str, Any]] = []
        self.traces: list[str] = []

    @contextmanager
    def root(self, name: str, session: str | None = None) -> Iterator[None]:
        """The app's own span around one run: the trace, its reward and (where the library has none) its session."""
        attributes: dict[str, Any] = {"app.reward": 1.0}
        if session is not None and self.library not in SESSION_ATTRIBUTE:
            attributes["session.id"] = session
        with self._session(session), self.tracer.start_as_current_span(name, attributes=attributes) as span:
            self.traces.append(format(span.get_span_context().trace_id, "032x"))
            yield

    def _session(self, session: str | None) -> AbstractContextManager[Any]:
        if session is None:
            return nullcontext()
        if self.library == "openinference":
            from openinference.instrumentation import using_session

            return using_session(session)
        if self.library == "traceloop":
            return _traceloop_session(session)
        return nullcontext()

    def ask(self, messages: list[dict[str, Any]], *, tools: bool = False, stream: bool = False) -> dict[str, Any]:
        options: dict[str, Any] = {"tools": TOOLS} if tools else {}
        if stream:
            chunks = self.client.chat.completions.create(
                model="scripted", messages=messages, stream=True, stream_options={"include_usage": True}, **options
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)  # type: ignore[union-attr]
            answer: dict[str, Any] = {"role": "assistant", "content": text}
        else:
            reply = self.client.chat.completions.create(model="scripted", messages=messages, **options)  # type: ignore[arg-type]
            answer = reply.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
            answer.setdefault("content", None)
        self.calls.append({"messages": [dict(m) for m in messages], "answer": answer, "tools": TOOLS if tools else []})
        return answer

    def run(self, app: str) -> None:
        getattr(self, app)()

    def chat(self) -> None:
        with self.root("chat"):
            self.ask([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Is it warm in Rome?"}])

    def tool_loop(self) -> None:
        with self.root("tool loop"):
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What is the weather in Paris?"},
            ]
            answer = self.ask(messages, tools=True)
            messages.append(answer)
            for call in answer["tool_calls"]:
                with self.tracer.start_as_current_span(
                    "execute_tool search",
                    attributes={"gen_ai.operation.name": "execute_tool", "openinference.span.kind": "TOOL"},
                ):
                    result = "18 C and sunny"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            self.ask(messages, tools=True)

    def conversation(self) -> None:
        with self.root("conversation"):
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
            for question in ("Is it warm in Oslo?", "And in Lima?", "Which is warmer?"):
                messages.append({"role": "user", "content": question})
                messages.append(self.ask(messages))

    def session(self) -> None:
        for turn, question in enumerate(("Is it raining in Bergen?", "Will it stop by noon?")):
            with self.root(f"session turn {turn}", session="weather-session"):
                self.ask([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
            self.flush()  # each trace in an export of its own

    def stream(self) -> None:
        with self.root("stream"):
            self.ask(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Stream the forecast."}],
                stream=True,
            )

    def retriever_first(self) -> None:
        """OpenInference's README agent: documents are retrieved, and that span is exported before the model's."""
        with self.root("rag"):
            retriever = {
                "openinference.span.kind": "RETRIEVER",
                "input.value": "weather in Nice",
                "retrieval.documents.0.document.content": "Nice: 22 C, clear skies.",
            }
            with self.tracer.start_as_current_span("retrieve", attributes=retriever):
                document = "Nice: 22 C, clear skies."
            self.flush()  # the retriever span leaves alone, before the model is called
            self.ask(
                [
                    {"role": "system", "content": f"{SYSTEM} Use this document: {document}"},
                    {"role": "user", "content": "What is the weather in Nice?"},
                ]
            )


@contextmanager
def _traceloop_session(session: str) -> Iterator[None]:
    """Traceloop's association properties for one session; they stay in the context until it is restored."""
    from traceloop.sdk import Traceloop

    token = otel_context.attach(otel_context.get_current())
    Traceloop.set_association_properties({"session_id": session})
    try:
        yield
    finally:
        otel_context.detach(token)


def _set_up(library: str, endpoint: str, encoding: str) -> Callable[[], None]:
    """Tracing as each library's documentation sets it up; returns what flushes every exporter."""
    if encoding == "json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if library == "traceloop":
        from traceloop.sdk import Traceloop
        from traceloop.sdk.instruments import Instruments

        Traceloop.init(
            app_name="weather-app",
            api_endpoint=endpoint,
            telemetry_enabled=False,
            instruments={Instruments.OPENAI},
            resource_attributes={"service.name": "weather-app"},
        )
        return _flush_all
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    processor = SimpleSpanProcessor(exporter) if library == "openinference" else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    if library == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif library == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetryInstrumentor

        OpenLLMetryInstrumentor().instrument(tracer_provider=provider)
    else:
        _set_up_openai_v2(endpoint, provider, encoding)
    return _flush_all


def _set_up_openai_v2(endpoint: str, provider: TracerProvider, encoding: str) -> None:
    """The official instrumentation sends messages as log events in its event modes, and metrics: both exported."""
    from opentelemetry import _logs, metrics
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if encoding == "json":
        from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    _logs.set_logger_provider(logger_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    OpenAIInstrumentor().instrument(
        tracer_provider=provider, logger_provider=logger_provider, meter_provider=meter_provider
    )


def _flush_all() -> None:
    from opentelemetry import _logs, metrics

    for provider in (trace.get_tracer_provider(), _logs.get_logger_provider(), metrics.get_meter_provider()):
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            assert flush() is not False, f"{type(provider).__name__} did not flush"


def main(library: str, endpoint: str, base_url: str, encoding: str = "protobuf") -> None:
    flush = _set_up(library, endpoint, encoding)
    ended = _Ended()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(ended)
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    report: dict[str, Any] = {}
    for name in APPS:
        app = App(library, client, flush)
        app.run(name)
        report[name] = {"traces": app.traces, "calls": app.calls}
    flush()
    for entry in report.values():
        entry["spans"] = [span for trace_id in entry["traces"] for span in ended.spans.get(trace_id, [])]
    for shut in (trace.get_tracer_provider(),):
        getattr(shut, "shutdown", lambda: None)()
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("TRACELOOP_TELEMETRY", "false")
    main(*sys.argv[1:5])
