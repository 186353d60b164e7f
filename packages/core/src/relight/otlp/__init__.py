"""Learn from the traces you already have: an OTLP/HTTP endpoint that turns GenAI traces into rollouts.

Teams already export their agents' LLM calls as OpenTelemetry traces (OpenLLMetry, OpenInference,
the official GenAI instrumentation, Logfire). Point the exporter at ``relight otlp serve`` and each
trace becomes a rollout in a store, its spans kept whole and its GenAI events (sent as log records)
joined to their calls; nothing it accepts is dropped. Any store will do, the one a training run uses
included: imported rollouts are recorded beside the queue, never in it, so runners go on claiming
exactly their own work::

    relight otlp serve --store sqlite:///traces.db --reward-attribute app.reward
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python my_agent.py
    relight export --store sqlite:///traces.db --format chat --min-reward 1 -o sft.jsonl

Imported calls have no token ids: :mod:`relight.otlp.imported_calls` retokenizes them with the policy's
chat template through relight's one renderer (:mod:`relight.chat`) and says, call by call, whether the
tokens are exactly the call (:func:`retokenize_call`); inexact calls are left out and counted. Needs the
``relight[otlp]`` extra (``opentelemetry-proto``).
"""

from relight.otlp.decode import (
    ForeignLog,
    ForeignSpan,
    OtlpBodyError,
    OtlpBodyTooLargeError,
    count_metric_points,
    decode_logs,
    decode_traces,
)
from relight.otlp.imported_calls import (
    ChatExport,
    ImportedRollout,
    Retokenized,
    TemplateRetokenizer,
    chat_records,
    explain_imported,
    prepare_spans,
    retokenize_call,
)
from relight.otlp.importer import (
    ImportOptions,
    ImportResult,
    ImportStats,
    Refusal,
    TraceConflictError,
    TraceImporter,
    add_reward,
)
from relight.otlp.receiver import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, create_otlp_app, serve_otlp

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "ChatExport",
    "ForeignLog",
    "ForeignSpan",
    "ImportOptions",
    "ImportResult",
    "ImportStats",
    "ImportedRollout",
    "OtlpBodyError",
    "OtlpBodyTooLargeError",
    "Refusal",
    "Retokenized",
    "TemplateRetokenizer",
    "TraceConflictError",
    "TraceImporter",
    "add_reward",
    "chat_records",
    "count_metric_points",
    "create_otlp_app",
    "decode_logs",
    "decode_traces",
    "explain_imported",
    "prepare_spans",
    "retokenize_call",
    "serve_otlp",
]
