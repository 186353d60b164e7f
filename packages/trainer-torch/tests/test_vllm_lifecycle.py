"""A vLLM server relight starts dies with the process that started it, however that process dies.

Real processes and real signals: a parent process starts the server (or, in the fast test, a stand-in
command that forks a child of its own, as vLLM forks its engine) under relight's watchdog, the test
SIGKILLs the parent, and waits, through pidfds (woken by the kernel when each process ends), for every
process of the server's group to be gone. Its own file: the module-scoped server of test_vllm.py must
not be running at the same time.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from relight_torch.vllm import server_process as vllm_server
from relight_torch.vllm import vllm_python
from relight_torch.vllm.server_process import start_watched

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on pidfds (Linux 5.3 or later)")

GONE_TIMEOUT = 120.0
"""Generous: the watchdog gives the server 20 s to shut down before it kills the group."""


def _open_pidfds(pids: list[int]) -> dict[int, int]:
    return {pid: os.pidfd_open(pid) for pid in pids}


def _wait_all_gone(pidfds: dict[int, int], timeout: float) -> list[int]:
    """Wait until every process ends (its pidfd becomes readable); the pids still running at the timeout."""
    waiting: dict[int, int] = dict(pidfds)
    try:
        while waiting:
            readable: list[int] = select.select(list(waiting.values()), [], [], timeout)[0]
            if not readable:
                break
            waiting = {pid: fd for pid, fd in waiting.items() if fd not in readable}
        return sorted(waiting)
    finally:
        for fd in pidfds.values():
            os.close(fd)


def _group(pgid: int) -> list[int]:
    """The processes in process group ``pgid``."""
    members: list[int] = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid:
                members.append(process.pid)
        except ProcessLookupError:
            continue
    return members


def _sigkill(parent: subprocess.Popen[str]) -> None:
    parent.send_signal(signal.SIGKILL)
    assert parent.wait(timeout=30) == -signal.SIGKILL


STAND_IN = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
print(f"serving {os.getpid()} {child.pid}", flush=True)
child.wait()
"""
"""A server stand-in: forks a child (as vLLM forks its engine core), says so, and runs until killed."""

PARENT = """
import sys
from relight_torch.vllm.server_process import start_watched
watchdog = start_watched(sys.executable, [sys.executable, "-c", sys.argv[1]], stdout=None, env=None)
print(f"watchdog {watchdog.pid}", flush=True)
sys.stdin.read()  # runs until killed
"""


def test_a_watched_command_and_its_children_end_when_their_parent_is_sigkilled() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, STAND_IN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    try:
        said = dict(parent.stdout.readline().split(" ", 1) for _ in range(2))
        watchdog = int(said["watchdog"])
        server, child = (int(pid) for pid in said["serving"].split())
        assert set(_group(watchdog)) == {watchdog, server, child}  # one group, led by the watchdog
        pidfds = _open_pidfds([watchdog, server, child])
        _sigkill(parent)
        assert _wait_all_gone(pidfds, GONE_TIMEOUT) == []
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        assert parent.stdin is not None
        parent.stdin.close()


def test_a_watched_command_that_exits_takes_the_watchdog_with_it_and_gives_its_status() -> None:
    """The watchdog stays out of the way: the trainer's watcher sees the server's own exit and status."""
    watched = start_watched(sys.executable, [sys.executable, "-c", "raise SystemExit(3)"], stdout=None, env=None)
    try:
        assert watched.wait(timeout=60) == 3
    finally:
        assert watched.stdin is not None
        watched.stdin.close()


VLLM_PARENT = """
import json, sys
from relight_torch.vllm import VLLMServer, VLLMServerOptions
options = VLLMServerOptions(kv_cache_gib=1, max_model_len=1024, tool_parser=None)
server = VLLMServer(sys.argv[1], served_name="smollm2", python=sys.argv[2], options=options).start()
print(json.dumps({"pid": server.pid, "port": server.port}), flush=True)
sys.stdin.read()  # runs until killed
"""


@pytest.mark.slow
@pytest.mark.skipif(vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it")
def test_a_vllm_server_ends_when_the_trainer_that_started_it_is_sigkilled(smollm2_path: Path) -> None:
    python = vllm_python()
    parent = subprocess.Popen(
        [sys.executable, "-c", VLLM_PARENT, str(smollm2_path), str(python)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    try:
        line = parent.stdout.readline()  # once the server answers /health
        assert line, f"the parent exited with {parent.wait()} before the server was up"
        started = json.loads(line)
        members = _group(started["pid"])
        assert len(members) >= 3  # the watchdog, vLLM's API server, its engine core
        pidfds = _open_pidfds(members)
        _sigkill(parent)
        assert _wait_all_gone(pidfds, GONE_TIMEOUT) == []
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", started["port"])) != 0  # nothing listens on its port any more
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        assert parent.stdin is not None
        parent.stdin.close()


def test_the_watchdog_runs_on_the_standard_library_alone() -> None:
    """It runs under the vLLM environment's interpreter, where relight is not installed."""
    source = Path(vllm_server.__file__).with_name("_watchdog.py").read_text()
    imports = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports
    assert imports <= set(sys.stdlib_module_names), imports
