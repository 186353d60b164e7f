"""The README's multi-node recipe, rehearsed on one machine: two Ray "nodes" (two ``ray start`` processes on
loopback), the store server on PostgreSQL, runners as Ray actors on the CPU node, relight-torch's tiny model
trained by the head node's trainer. The commands are the recipe's, plus the ports two nodes on one host need."""

import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from relight_testing.postgres import PostgresServer, postgres_unavailable

_UNAVAILABLE = postgres_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")]
pytest.importorskip("ray", reason="Ray is not installed: pip install 'relight[ray]'")
pytest.importorskip("relight_torch", reason="the rehearsal trains with relight-torch")

TRAIN = Path(__file__).parents[1] / "examples" / "frameworks" / "multinode" / "train.py"
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _agent_ports() -> list[str]:
    """Ports of a node's own agents: two nodes on one host must not both take the defaults."""
    names = ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port"]
    names.append("runtime-env-agent-port")
    return [option for name in names for option in (f"--{name}", str(_free_port()))]


class Started:
    """A long-running command, started and waited for until it printed ``until``; its output goes to ``log``."""

    def __init__(self, command: list[str], env: dict[str, str], until: str, log: Path) -> None:
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = log.open("w", buffering=1)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.write(line)
            if until in line:
                self.first = line
                # The rest goes on to the log from a thread, so the process never blocks on a full pipe.
                self.drain = threading.Thread(target=self.log.writelines, args=(self.process.stdout,), daemon=True)
                self.drain.start()
                return
        self.stop()
        raise AssertionError(f"{command[:3]} exited before printing {until!r}:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM (``ray start --block`` then stops its node's processes), SIGKILL if that takes too long."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if hasattr(self, "drain"):
            self.drain.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.log.close()


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


def test_the_multinode_recipe_on_two_loopback_nodes(postgres: PostgresServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RELIGHT_STORE_TOKEN": secrets.token_hex(16),  # every node exports the same tokens
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "COLUMNS": "500",
    }
    ray_port = _free_port()
    ray_temp = tempfile.mkdtemp(prefix="rr-")  # short: Ray's socket paths must fit in 107 bytes
    started: list[Started] = []
    try:
        serve = [str(BIN / "relight"), "store", "serve", "--store", postgres.create_database(), "--port", "0"]
        started.append(Started(serve, env, "serving ", tmp_path / "store.log"))
        store_url = started[-1].first.split()[-1]
        head = [str(BIN / "ray"), "start", "--head", "--block", "--port", str(ray_port), "--num-cpus", "1"]
        head += ["--resources", '{"gpu_node": 1}', "--include-dashboard", "false", "--disable-usage-stats"]
        head += ["--dashboard-port", str(_free_port()), "--ray-client-server-port", str(_free_port())]
        head += ["--temp-dir", ray_temp, *_agent_ports()]
        started.append(Started(head, env, "Ray runtime started", tmp_path / "head.log"))
        cpu = [str(BIN / "ray"), "start", "--block", "--address", f"127.0.0.1:{ray_port}", "--num-cpus", "1"]
        cpu += ["--resources", '{"cpu_node": 2}', "--disable-usage-stats", *_agent_ports()]
        started.append(Started(cpu, env, "Ray runtime started", tmp_path / "cpu.log"))

        train = [sys.executable, str(TRAIN), "--store", store_url, "--ray-address", f"127.0.0.1:{ray_port}"]
        done = subprocess.run(
            [*train, "--runners", "2", "--steps", "2", "--gateway-port", str(_free_port())],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=480,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    finally:
        for process in reversed(started):
            process.stop()
        shutil.rmtree(ray_temp, ignore_errors=True)

    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(summary["policy_versions"]) == 2, summary
    assert summary["policy_versions"] == list(itertools.accumulate(summary["steps_with_signal"])), summary
    assert summary["rollouts"] == {"succeeded": 12}  # 2 steps × 2 tasks × 3 samples, none lost
    assert summary["runner_nodes"]
    assert all("cpu_node" in resources for resources in summary["runner_nodes"])  # runners only on the CPU node
