"""Learn from the traces you already have: an OTLP/HTTP endpoint that turns GenAI traces into rollouts.

Teams already export their agents' LLM calls as OpenTelemetry traces (OpenLLMetry, OpenInference,
Logfire, the OpenAI Agents SDK's exporters). Point the exporter at ``relight otlp serve`` and each
trace becomes a rollout in a store, its spans kept whole. Any store will do, the one a training run
uses included: imported rollouts are recorded beside the queue, never in it, so runners go on
claiming exactly their own work::

    relight otlp serve --store sqlite:///traces.db --reward-attribute app.reward
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces python my_agent.py
    relight export --store sqlite:///traces.db --format chat --min-reward 1 -o sft.jsonl

Imported calls have no token ids: :mod:`relight.otlp.transitions` retokenizes them with the policy's
chat template and says, call by call, whether the tokens reproduce the traced text. Needs the
``relight[otlp]`` extra (``opentelemetry-proto``).
"""

from relight.otlp.decode import ForeignSpan, OtlpBodyError, OtlpBodyTooLargeError, decode_traces
from relight.otlp.importer import ImportOptions, ImportResult, TraceConflictError, TraceImporter, add_reward
from relight.otlp.receiver import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, create_otlp_app, serve_otlp
from relight.otlp.transitions import (
    ImportedRollout,
    Retokenized,
    TemplateRetokenizer,
    chat_records,
    explain_imported,
    prepare_spans,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "ForeignSpan",
    "ImportOptions",
    "ImportResult",
    "ImportedRollout",
    "OtlpBodyError",
    "OtlpBodyTooLargeError",
    "Retokenized",
    "TemplateRetokenizer",
    "TraceConflictError",
    "TraceImporter",
    "add_reward",
    "chat_records",
    "create_otlp_app",
    "decode_traces",
    "explain_imported",
    "prepare_spans",
    "serve_otlp",
]
