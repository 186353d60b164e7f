"""``relight show``: calls numbered one way in the verdicts and in ``--text``, and a dev rollout's verdict saying so."""

from __future__ import annotations

import asyncio
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import openai
import pytest
from rich.console import Console

from relight import Trainer, semconv
from relight.agent import LLM, rollout
from relight.cli import main
from relight.records import AttemptStatus, RolloutRequest
from relight.scripted.server import ScriptedUpstream
from relight.stores.sqlite import SqliteStore
from relight_testing.store import make_span


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("RELIGHT_STORE", raising=False)


def _show(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def test_the_verdicts_and_the_text_number_each_call_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three calls, the second failed: ``call 2`` is the failed one in both views, counted from 1."""
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        store = SqliteStore.from_url(url)
        await store.enqueue([RolloutRequest(input="q", rollout_id="ro-three")])
        claimed = await store.claim("w")
        assert claimed is not None
        attempt = claimed[1].attempt_id

        def call(span_id: str, at: int, text: str, *, failed: bool = False) -> dict[str, object]:
            attributes: dict[str, object] = {
                semconv.SPAN_KIND: "llm",
                semconv.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "content": text}]),
            }
            if not failed:
                attributes[semconv.PROMPT_TOKEN_IDS] = [1, 2]
                attributes[semconv.RESPONSE_TOKEN_IDS] = [3]
            span = make_span("ro-three", attempt, span_id, name="chat", start_time=at, attributes=attributes)
            return span.model_copy(update={"status_code": "ERROR", "status_message": "upstream 500"} if failed else {})

        await store.add_spans(
            [call("c1", 1_000, "first"), call("c2", 2_000, "second", failed=True), call("c3", 3_000, "third")]
        )
        await store.finish_attempt("ro-three", attempt, AttemptStatus.SUCCEEDED)
        await store.close()

    asyncio.run(fill())
    shown = _show(["show", "ro-three", "--store", url], capsys)
    verdicts = [line.lstrip("├└─ ") for line in shown if line.endswith(("c1", "c2", "c3"))]
    assert [line.split(" not trained")[0] + " " + line.rsplit(maxsplit=1)[1] for line in verdicts] == [
        "call 1 c1",
        "call 2 c2",
        "call 3 c3",
    ]
    assert "call 2 not trained: failed call  upstream 500  c2" in verdicts
    text = _show(["show", "ro-three", "--store", url, "--text"], capsys)
    headings = [line for line in text if line.startswith("── call")]
    assert headings == ["── call 1  (chat)", "── call 2  (chat)", "── call 3  (chat)"]
    assert text[text.index("── call 2  (chat)") + 1 : text.index("── call 3  (chat)")] == [
        "user: second",
        "error: upstream 500",
    ]


@rollout
async def asks_once(task: str, llm: LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
    return 1.0


async def test_a_dev_rollouts_verdict_says_dev_mode_never_trains(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(store=url, console=Console(file=io.StringIO()))
        (result,) = await trainer.adev(asks_once, ["hello"], base_url=upstream.base_url, model=upstream.model)
    output = io.StringIO()
    status = await asyncio.to_thread(_main_to, output, ["show", result.rollout.rollout_id, "--store", url])
    assert status == 0
    (line,) = [line for line in output.getvalue().splitlines() if "not trained" in line]
    assert "call 1 " in line
    assert "not trained: validation rollout" in line
    assert "dev mode: never trained" in line


def _main_to(output: io.StringIO, argv: list[str]) -> int:
    with redirect_stdout(output):
        return main(argv)
