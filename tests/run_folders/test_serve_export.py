"""``relight serve`` and ``relight export-model`` on a real tiny-model run (TorchEngine, full weights).

The served policy (the command, in a process of its own) and the exported folder loaded by transformers give
the same greedy completion; bad folders and checkpoints are refused with exit status 2 and nothing is written.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from relight.cli import main

QUESTION = [{"role": "user", "content": "What is 44 * 47?"}]
TOKENS = 12


def greedy_with_transformers(folder: Path) -> str:
    """The folder's greedy completion of :data:`QUESTION`, as transformers gives it."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=TOKENS, do_sample=False)
    return str(tokenizer.decode(output[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True))


def greedy_served(url: str, model: str) -> str:
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=TOKENS, temperature=0)
    return reply.choices[0].message.content or ""


def test_the_served_policy_and_the_exported_folder_complete_alike(two_runs: Any, tmp_path: Path) -> None:
    out = tmp_path / "exported"
    assert main(["export-model", str(two_runs.fast), "--out", str(out)]) == 0
    record = json.loads((out / "relight_export.json").read_text())
    assert (record["step"], record["policy_version"], record["merged"]) == (
        3,
        two_runs.fast_history[-1]["policy_version"],
        False,
    )
    assert not (out / "trainer_state.pt").exists()  # relight's optimizer and RNG state stay in the checkpoint
    exported = greedy_with_transformers(out)
    assert exported.strip()

    command = [sys.executable, "-m", "relight.cli", "serve", str(two_runs.fast), "--port", "0", "--json"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line, server.communicate(timeout=60)[1]
            served = json.loads(line)
            assert (served["model"], served["engine"], served["step"]) == ("relight-tiny", "torch", 3)
            assert greedy_served(served["url"], served["model"]) == exported
        finally:
            server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0


def test_an_earlier_step_and_bad_input(two_runs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-model", str(two_runs.fast), "--step", "2", "--out", str(tmp_path / "step2")]) == 0
    assert json.loads((tmp_path / "step2" / "relight_export.json").read_text())["step"] == 2
    capsys.readouterr()
    assert main(["export-model", str(two_runs.fast), "--step", "1", "--out", str(tmp_path / "no")]) == 2
    assert "has no checkpoint of step 1; it keeps steps 2, 3" in capsys.readouterr().err

    assert main(["export-model", str(two_runs.fast), "--out", str(tmp_path / "step2")]) == 2  # not empty
    assert "is not empty: export into a new folder" in capsys.readouterr().err
    assert json.loads((tmp_path / "step2" / "relight_export.json").read_text())["step"] == 2  # left as it was

    with socket.socket() as taken:  # a port something else holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(two_runs.fast), "--port", str(port)]) == 2
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy2(two_runs.fast / "run.json", bare / "run.json")
    assert main(["serve", str(bare)]) == 2
    assert f"the run in {bare} has no checkpoint in {bare / 'checkpoints'}" in capsys.readouterr().err

    changed = tmp_path / "changed"
    shutil.copytree(two_runs.fast, changed)
    weights = changed / "checkpoints" / "step-3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert main(["export-model", str(changed), "--step", "3", "--out", str(tmp_path / "cut")]) == 2
    assert "is not whole: model.safetensors is" in capsys.readouterr().err
    assert not (tmp_path / "cut").exists()
    assert main(["export-model", str(changed), "--out", str(tmp_path / "newest-whole")]) == 0  # step 2 is whole
    assert json.loads((tmp_path / "newest-whole" / "relight_export.json").read_text())["step"] == 2

    record = json.loads((changed / "run.json").read_text())
    (changed / "run.json").write_text(json.dumps(record | {"schema": 2, "relight_version": "0.9.0"}))
    assert main(["serve", str(changed)]) == 2
    assert "run-folder layout 2, written by relight 0.9.0" in capsys.readouterr().err
