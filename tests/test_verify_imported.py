"""``relight verify --tokenizer`` on traces a real OpenTelemetry SDK exported to ``relight otlp serve``'s app: every
imported call's exactness is checked again with the tokenizer, an inexact one is said with its reason, and a stored
mark that claims more than the text gives is a problem."""

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.json.http.trace_exporter")

from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import relight
from relight import semconv
from relight._internal.server import AsgiServer
from relight.cli import main
from relight.otlp import create_otlp_app
from relight_torch.models.tiny import tiny_tokenizer


def chat_span_attributes(parts: list[dict[str, Any]], answer: str) -> dict[str, Any]:
    """An LLM call as the OpenTelemetry GenAI conventions write it (messages as parts)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": parts}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]),
    }


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store holding one exported trace (a text call, and one shown an image), and the tokenizer's folder."""
    folder = tmp_path_factory.mktemp("imported")
    tokenizer = folder / "tokenizer"
    tiny_tokenizer().save_pretrained(tokenizer)
    path = folder / "traces.db"
    store = relight.open_store(f"sqlite:///{path}")
    with AsgiServer(create_otlp_app(store)) as server:
        provider = TracerProvider(resource=Resource.create({"service.name": "verify-test"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")))
        tracer = provider.get_tracer("app")
        image = {"type": "uri", "modality": "image", "uri": "https://example.com/bike.jpg"}
        with tracer.start_as_current_span("agent run"):
            text = chat_span_attributes([{"type": "text", "content": "How much is a service?"}], "40 euros.")
            with tracer.start_as_current_span("chat tiny", attributes=text):
                pass
            seen = chat_span_attributes([{"type": "text", "content": "What is this?"}, image], "A bike.")
            with tracer.start_as_current_span("chat tiny", attributes=seen):
                pass
        provider.shutdown()
        server.call(store.close())
    return path, tokenizer


def verify(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, dict[str, Any]]:
    status = main(["verify", "--store", f"sqlite:///{path}", "--json", *options])
    return status, json.loads(capsys.readouterr().out)


def test_imported_calls_are_checked_again_with_the_tokenizer(
    imported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, tokenizer = imported
    status, report = verify(path, capsys, "--tokenizer", str(tokenizer))
    assert (status, report["problems"]) == (0, {})
    assert report["checked"]["imported_calls_rechecked"] == 2
    (inexact,) = report["notices"]["imported_inexact"]["examples"]
    assert "uri content a text template cannot render" in inexact
    assert report["notices"]["imported_without_reward"]["count"] == 1

    status, report = verify(path, capsys)  # without a tokenizer, said to be unchecked
    assert status == 0
    assert report["notices"]["imported_not_rechecked"]["count"] == 2


def test_a_stored_mark_of_exactness_the_text_does_not_bear_out_is_a_problem(
    imported: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, tokenizer = imported
    copied = tmp_path / "traces.db"
    shutil.copy(path, copied)
    with sqlite3.connect(copied) as db:
        for sequence_id, data in db.execute("SELECT sequence_id, data FROM spans").fetchall():
            span = json.loads(data)
            if "bike.jpg" in str(span["attributes"].get(semconv.GEN_AI_INPUT_MESSAGES)):
                span["attributes"][semconv.RETOKENIZED_EXACT] = True  # a mark that claims the image was rendered
                db.execute("UPDATE spans SET data = ? WHERE sequence_id = ?", (json.dumps(span), sequence_id))
                marked = span["span_id"]
    status, report = verify(copied, capsys, "--tokenizer", str(tokenizer))
    assert status == 1
    (example,) = report["problems"]["exactness_mark_wrong"]["examples"]
    assert marked in example
    assert "marked exact=True, is False" in example
