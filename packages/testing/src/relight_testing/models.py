"""Helpers for tests: a real pretrained model as a fixture, and hand-made groups of answers.

Import the fixture into a ``conftest.py``::

    from relight_torch.testing import smollm2_path  # noqa: F401

:class:`TokenizerReference` is what :mod:`relight_testing.compat` holds spans to for a model
served by relight-torch (prompts rendered as the engine renders them).

``smollm2_path`` is session-scoped and the folder behind it is cached across runs
(:func:`relight_torch.models.smollm2`); where the model cannot be had (no registry, no ``gguf``
package) the tests that use it are skipped with the reason. :func:`answers` makes a GRPO group
whose logprobs are those the engine's policy gives it now.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from relight.engine import GenerationRequest
from relight.records import Transition
from relight_torch.chat import render
from relight_torch.engine import TorchEngine
from relight_torch.learner import Learner, Sample
from relight_torch.models import ModelUnavailable, smollm2

__all__ = [
    "QUESTION",
    "Served",
    "TokenizerReference",
    "answers",
    "final_gradients",
    "free_port",
    "served_process",
    "server_process",
    "smollm2_path",
    "smollm2_server",
    "smollm2_tool_server",
]

QUESTION = [{"role": "user", "content": "What is 12 * 7?"}]


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Hugging Face folder, built once and cached outside the repository."""
    try:
        return smollm2()
    except ModelUnavailable as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not available here: {exc}")


@dataclass(frozen=True, slots=True)
class Served:
    """A model served as ``python -m relight_torch.server`` and what :mod:`relight_testing.compat` holds it to."""

    base_url: str
    model: str
    reference: TokenizerReference


@pytest.fixture(scope="module")
def smollm2_server(smollm2_path: Path) -> Iterator[Served]:
    """SmolLM2-135M-Instruct served by relight-torch in a process of its own, for one test module."""
    with served_process(smollm2_path, name="smollm2") as served:
        yield served


@pytest.fixture(scope="module")
def smollm2_tool_server(smollm2_path: Path) -> Iterator[Served]:
    """:func:`smollm2_server` with ``--force-first-tool-call``, for frameworks that always send ``tool_choice: auto``
    (AutoGen, CrewAI): SmolLM2 never picks a tool by itself; once a tool has answered, it answers freely."""
    with served_process(smollm2_path, name="smollm2", options=["--force-first-tool-call"]) as served:
        yield served


@contextmanager
def served_process(path: Path, *, name: str, options: Sequence[str] = ()) -> Iterator[Served]:
    """The model at ``path`` served as ``python -m relight_torch.server`` under ``name`` (with the server's
    command-line ``options``) for the block."""
    port = free_port()
    command = [sys.executable, "-m", "relight_torch.server", str(path), "--name", name, "--port", str(port), *options]
    with server_process(command):
        yield Served(f"http://127.0.0.1:{port}/v1", name, TokenizerReference(AutoTokenizer.from_pretrained(path)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def server_process(command: Sequence[str]) -> Iterator[None]:
    """Run a Uvicorn server process for the block: ready when it logs that it runs (its own line, not a sleep)."""
    server = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "Uvicorn running on" in line:
                break
        else:
            pytest.fail(f"{' '.join(command[:4])} exited with {server.wait()} before serving")
        threading.Thread(target=server.stderr.read, daemon=True).start()  # its log never fills the pipe
        yield
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()


@contextmanager
def final_gradients(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Each parameter's gradient as the block's last backward pass left it (clipped, if the learner clipped it).

    The learner drops every gradient once its parameter has moved, so tests that compare
    gradients take them here: the list is filled, in ``model.parameters()`` order, when the block ends.
    """
    parameters = list(model.parameters())
    seen: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Any:
        return lambda parameter: seen.__setitem__(index, parameter.grad)

    handles = [p.register_post_accumulate_grad_hook(keep(i)) for i, p in enumerate(parameters)]
    gradients: list[torch.Tensor] = []
    try:
        yield gradients
    finally:
        for handle in handles:
            handle.remove()
    gradients.extend(seen[i] for i in range(len(parameters)) if i in seen)


def answers(engine: TorchEngine, texts: list[str], rewards: list[float]) -> list[Transition]:
    """One group: :data:`QUESTION` answered with each text, scored by hand, logprobs as the engine would record
    them now (under policy version 0)."""
    prompt = engine.prompt_ids(GenerationRequest(model="m", messages=QUESTION))
    responses = [[*engine.tokenizer.encode(text), engine.tokenizer.eos_token_id] for text in texts]
    logprobs = Learner(engine.model, pad_id=engine.pad_id).logprobs([Sample(prompt, r) for r in responses])
    return [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id="task",
            step=0,
            prompt_token_ids=prompt,
            response_token_ids=response,
            response_logprobs=logprobs[i],
            reward=reward,
            policy_version=0,
        )
        for i, (response, reward) in enumerate(zip(responses, rewards, strict=True))
    ]


class TokenizerReference:
    """A :class:`relight_testing.compat.Reference` from a tokenizer: prompts as relight-torch renders them,
    or (``engine_rendering=False``) as the bare chat template does, which is what other servers use."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, engine_rendering: bool = True) -> None:
        self.tokenizer = tokenizer
        self.engine_rendering = engine_rendering
        self.end_of_turn = int(tokenizer.eos_token_id)  # type: ignore[arg-type]

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        if self.engine_rendering:
            return render(self.tokenizer, messages, tools=tools, add_generation_prompt=True)
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        return list(self.tokenizer.encode(str(text), add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
