"""Real models for tests: SmolLM2-135M-Instruct as a fixture, served by relight-torch in a process of its own.

Needs relight-torch (``pip install relight-testing[torch]``). Import the fixtures into a ``conftest.py``::

    from relight_testing.models import smollm2_path, smollm2_server  # noqa: F401

``smollm2_path`` is session-scoped and the folder behind it is cached across runs
(:func:`relight_torch.models.smollm2`); where the model cannot be had (no registry, no ``gguf``
package) the tests that use it are skipped with the reason. ``smollm2_server`` serves it as
``python -m relight_torch.server`` for a test module; :class:`TokenizerReference` is what
:mod:`relight_testing.compat` holds spans to for a model served by relight-torch (prompts rendered as
the engine renders them).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from relight_testing.faults import free_port
from relight_torch.engine.chat import render
from relight_torch.models import ModelUnavailable, smollm2

__all__ = [
    "Served",
    "TokenizerReference",
    "served_process",
    "server_process",
    "smollm2_path",
    "smollm2_server",
    "smollm2_tool_server",
]


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
