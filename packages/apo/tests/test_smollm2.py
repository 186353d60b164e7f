"""Two rounds of APO end to end with the real model: SmolLM2-135M-Instruct on vLLM, the agent's model and the optimiser.

What a small model makes of the optimiser's job is not under test (it may well write no usable prompt,
which is then sent back, dropped and counted); that the whole path holds with a real model and a real
server is: every rollout pinned to a published prompt version, the optimiser's replies read and
checked, two rounds recorded with their costs, a best prompt kept.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

import relight
from relight_apo import APO, Optimizer

vllm = pytest.importorskip("relight_torch.vllm", reason="the real model is served by relight-torch's vLLM server")
models = pytest.importorskip("relight_torch.models")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        vllm.vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it"
    ),
]

SEED = "Answer the arithmetic question with the number alone."
TRAIN = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in ((2, 3), (7, 5), (10, 4), (6, 6))]
VAL = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in ((1, 1), (4, 5))]


@relight.rollout
async def adder(task: dict[str, Any], llm: relight.LLM) -> float:
    system = relight.resource("system_prompt", default=SEED)
    async with httpx.AsyncClient(timeout=600) as client:
        reply = await client.post(
            f"{llm.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {llm.api_key}"},
            json={
                "model": llm.model,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": task["question"]}],
                "max_tokens": 16,
                "temperature": 0.0,
            },
        )
    return 1.0 if task["answer"] in str(reply.json()["choices"][0]["message"]["content"]) else 0.0


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    try:
        path = models.smollm2()
    except models.ModelUnavailable as error:
        pytest.skip(f"SmolLM2-135M-Instruct is not available here: {error}")
    with vllm.VLLMServer(path, served_name="smollm2", options=vllm.VLLMServerOptions(max_model_len=4096)) as served:
        yield served


def test_two_rounds_with_smollm2_as_agent_model_and_optimiser(server: Any, tmp_path: Path) -> None:
    apo = APO(
        {"system_prompt": SEED},
        optimizer=Optimizer(base_url=server.base_url, model="smollm2", max_tokens=160, timeout=600),
        base_url=server.base_url,
        model="smollm2",
        budget=40,
        minibatch=2,
        rounds=2,
        perfect=None,
        max_tries=1,  # sending a bad reply back is the scripted tests' to check; here, one reply a round
        show_chars=800,
    )
    relight.Trainer(algorithm=apo, run_dir=tmp_path, console=Console(file=io.StringIO())).fit(adder, TRAIN, VAL)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rounds = [row for row in rows if row["kind"] == "train"]
    assert [row["step"] for row in rounds] == [1, 2]
    assert rounds[-1]["candidates_tried"] == 2
    assert rounds[-1]["optimizer_calls"] >= 2
    assert rounds[-1]["optimizer_input_tokens"] > 0
    outcomes = ("candidates_dropped", "candidates_rejected", "candidates_validated")
    assert sum(rounds[-1][outcome] for outcome in outcomes) == 2, "each proposal dropped, rejected or validated"
    assert apo.best is not None
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "finished"
