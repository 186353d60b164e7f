"""The compatibility kit against the real SmolLM2-135M-Instruct, served by relight-torch in-process and as a server."""

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from relight.testing.compat import ClientCompatibility, Policy, serve_policy
from relight_torch.engine import TorchEngine
from relight_torch.testing import TokenizerReference

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_path: Path) -> Iterator[TorchEngine]:
    with TorchEngine.from_pretrained(smollm2_path, name="smollm2") as engine:
        yield engine


class TestInProcess(ClientCompatibility):
    @pytest.fixture(scope="class")
    @classmethod
    def policy(cls, smollm2_engine: TorchEngine) -> Iterator[Policy]:
        with serve_policy(
            [smollm2_engine], reference=TokenizerReference(smollm2_engine.tokenizer), model="smollm2"
        ) as policy:
            yield policy


class TestServerProcess(ClientCompatibility):
    """The same model as `python -m relight_torch.server`, a process of its own, behind the gateway."""

    @pytest.fixture(scope="class")
    @classmethod
    def policy(cls, smollm2_path: Path) -> Iterator[Policy]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "relight_torch.server", str(smollm2_path), "--name", "smollm2"]
        server = subprocess.Popen([*command, "--port", str(port)], stderr=subprocess.PIPE, text=True)
        try:
            assert server.stderr is not None
            for line in server.stderr:  # its own readiness line, not a sleep
                if "Uvicorn running on" in line:
                    break
            else:
                pytest.fail(f"the server exited with {server.wait()} before serving")
            threading.Thread(target=server.stderr.read, daemon=True).start()  # its log never fills the pipe
            reference = TokenizerReference(AutoTokenizer.from_pretrained(smollm2_path))
            with serve_policy([f"http://127.0.0.1:{port}/v1"], reference=reference, model="smollm2") as policy:
                yield policy
        finally:
            server.terminate()
            server.wait(timeout=30)
            if server.stderr is not None:
                server.stderr.close()
