"""Run a command-line agent for one rollout: a fresh folder, the attempt's gateway, no other network, a time limit.

:func:`run_cli` is the whole mechanism; :class:`CliHarness` makes it a relight :class:`~relight.agent.Agent`
whose reward function reads the :class:`HarnessResult` (exit status, output, the folder's final state).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import JsonValue

from relight.agent import LLM, Agent, RolloutResult
from relight.errors import ConfigError
from relight.harness.clis import CliAgent

__all__ = ["CliHarness", "HarnessResult", "Network", "run_cli"]

Network = Literal["isolated", "host"]
"""``isolated``: a network namespace of its own, where only the gateway can be reached (checked before
the CLI starts). ``host``: the machine's network, unchecked (for machines without ``unshare``)."""

_SKIPPED = frozenset({".git", "node_modules", "__pycache__", ".pytest_cache", ".venv"})
_MAX_FILE_BYTES = 256 * 1024
_PASSED_ON = ("PATH", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""The only variables of relight's own environment a CLI gets: no key or setting of the user's leaks into a rollout."""


@dataclass(frozen=True, slots=True)
class HarnessResult:
    """How one run of a CLI went: what the reward function reads."""

    exit_code: int | None
    """The CLI's exit status; None when it was killed at the time limit."""
    timed_out: bool
    stdout: str
    stderr: str
    workdir: Path
    """The folder it worked in, as it left it (it exists while the reward function runs)."""
    files: dict[str, str] = field(default_factory=dict[str, str])
    """Its text files at the end, by path relative to ``workdir`` (``.git``, caches and files over 256 KiB left out)."""
    seconds: float = 0.0
    isolation: dict[str, JsonValue] | None = None
    """The network namespace's check (its devices, what an outside connection did); None on the host network."""


class HarnessError(ConfigError):
    """The harness cannot run a CLI as asked (no ``unshare``, no network namespace allowed)."""


async def run_cli(
    cli: CliAgent,
    prompt: str,
    llm: LLM,
    *,
    workdir: Path,
    home: Path,
    timeout: float = 600.0,
    network: Network = "isolated",
) -> HarnessResult:
    """Run ``cli`` on ``prompt`` in ``workdir`` with ``home`` as its home folder, its calls going to ``llm``.

    With ``network="isolated"`` the CLI runs under ``unshare --net`` (``--map-root-user`` for a user
    that is not root), in a namespace where 127.0.0.1 is the only network and the gateway's port is
    relayed to the gateway (:mod:`relight.harness._netns`); that isolation is checked before the CLI
    starts and reported in :attr:`HarnessResult.isolation`. At ``timeout`` seconds the CLI's whole
    process group is killed.

    Raises:
        HarnessError: the CLI is not installed, or isolation was asked for and cannot be had (no
            ``unshare``, or namespaces refused).
    """
    started = time.monotonic()
    command = cli.command(prompt)
    if shutil.which(command[0]) is None:
        raise HarnessError(f"{cli.name}: {command[0]!r} is not an executable here; install the CLI (npm) first")
    prepare_folder(home)
    prepare_folder(workdir)
    with tempfile.TemporaryDirectory(prefix="rh-", dir="/tmp") as scratch:  # short: a socket path holds 108 bytes
        relay: asyncio.Server | None = None
        relaying: set[asyncio.Task[Any]] = set()
        report = Path(scratch) / "isolation.json"
        if network == "isolated":
            url = urlsplit(llm.base_url)
            port = url.port or 80
            socket_path = str(Path(scratch) / "gateway.sock")

            async def relay_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task is not None
                relaying.add(task)
                try:
                    await _relay(reader, writer, url.hostname or "127.0.0.1", port)
                finally:
                    relaying.discard(task)

            relay = await asyncio.start_unix_server(relay_one, socket_path)
            inside = LLM(f"http://127.0.0.1:{port}{url.path}", llm.api_key, llm.model)
            # Run as a file, not `-m relight.harness._netns`: importing relight would add seconds to every rollout.
            prefix = [*_unshare(), sys.executable, "-I", str(Path(__file__).with_name("_netns.py"))]
            prefix += ["--port", str(port), "--socket", socket_path, "--report", str(report), "--"]
        else:
            inside, prefix = llm, []
        environment = {name: os.environ[name] for name in _PASSED_ON if name in os.environ}
        environment |= {"HOME": str(home), "TMPDIR": scratch, "TERM": "dumb", "NO_COLOR": "1", "CI": "1"}
        environment |= cli.configure(home, inside)
        try:
            exit_code, stdout, stderr = await _run([*prefix, *command], workdir, environment, timeout)
        finally:
            if relay is not None:
                relay.close()
                for task in relaying:  # connections the CLI's processes left open (keep-alive)
                    task.cancel()
                await asyncio.gather(*relaying, return_exceptions=True)
        isolation = _read_report(report)
    if network == "isolated" and isolation is None and exit_code is not None:
        raise HarnessError(f"the network namespace could not be made for {cli.name}: {stderr.strip()[-500:]}")
    return HarnessResult(
        exit_code=exit_code,
        timed_out=exit_code is None,
        stdout=stdout,
        stderr=stderr,
        workdir=workdir,
        files=snapshot(workdir),
        seconds=time.monotonic() - started,
        isolation=isolation,
    )


def prepare_folder(folder: Path, files: Mapping[str, str] | None = None) -> None:
    """Make ``folder`` (and its parents) and write ``files`` into it, by relative path."""
    folder.mkdir(parents=True, exist_ok=True)
    for relative, text in (files or {}).items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _read_report(report: Path) -> dict[str, JsonValue] | None:
    return json.loads(report.read_text()) if report.exists() else None


def _unshare() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        raise HarnessError(
            "network='isolated' needs util-linux's unshare (apt-get install util-linux); "
            "network='host' runs the CLI on this machine's network, unchecked"
        )
    return [unshare, "--net"] if os.geteuid() == 0 else [unshare, "--net", "--map-root-user"]


async def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, so the time limit ends every process it started
    )
    output = asyncio.ensure_future(process.communicate())
    try:
        stdout, stderr = await asyncio.wait_for(asyncio.shield(output), timeout)
        exit_code: int | None = process.returncode
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = await output
        exit_code = None
    return exit_code, stdout.decode(errors="replace"), stderr.decode(errors="replace")


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
    """One connection from inside the namespace, relayed to the gateway."""
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
    except OSError:
        writer.close()
        return

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()

    await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer))
    for end in (writer, upstream_writer):
        end.close()


def snapshot(workdir: Path) -> dict[str, str]:
    """The text of each file under ``workdir`` by relative path (caches, ``.git`` and large files left out)."""
    files: dict[str, str] = {}
    for path in sorted(workdir.rglob("*")):
        relative = path.relative_to(workdir)
        if any(part in _SKIPPED for part in relative.parts) or not path.is_file():
            continue
        if path.stat().st_size <= _MAX_FILE_BYTES:
            files[relative.as_posix()] = path.read_text(errors="replace")
    return files


class CliHarness(Agent):
    """A command-line agent as a relight agent: each rollout runs :func:`run_cli` in a fresh folder.

    Args:
        cli: which CLI (:class:`~relight.harness.CodexCLI`, :class:`~relight.harness.ClaudeCode`, or your own).
        prompt: the task's prompt for the CLI.
        reward: the rollout's reward from the task and the :class:`HarnessResult` (its folder still there).
        files: the files the folder starts with, by relative path (the code to fix, its tests).
        timeout: seconds before the CLI is killed (the reward function still runs, on what it left).
        network: see :data:`Network`.
    """

    def __init__(
        self,
        cli: CliAgent,
        *,
        prompt: Callable[[Any], str],
        reward: Callable[[Any, HarnessResult], float | None],
        files: Callable[[Any], Mapping[str, str]] | None = None,
        timeout: float = 600.0,
        network: Network = "isolated",
    ) -> None:
        self.cli = cli
        self.prompt = prompt
        self.reward = reward
        self.files = files
        self.timeout = timeout
        self.network: Network = network

    @property
    def name(self) -> str:
        return self.cli.name

    async def rollout(self, task: Any, llm: LLM) -> RolloutResult:
        with tempfile.TemporaryDirectory(prefix=f"relight-{self.cli.name}-") as scratch:
            workdir, home = Path(scratch) / "work", Path(scratch) / "home"
            prepare_folder(workdir, self.files(task) if self.files else None)
            result = await run_cli(
                self.cli, self.prompt(task), llm, workdir=workdir, home=home, timeout=self.timeout, network=self.network
            )
            return await asyncio.to_thread(self.reward, task, result)
