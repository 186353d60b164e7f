"""Run a command (the vLLM server) for as long as the process that started this one lives.

``python -I _watchdog.py COMMAND...``, started by :class:`~relight_torch.vllm.server_process.VLLMServer` with
the vLLM environment's interpreter (so it imports nothing but the standard library) as the leader of
a process group of its own, with a pipe as its standard input whose other end only the trainer holds.
The pipe reaches end-of-file when the trainer exits, however it exits: SIGKILL and an out-of-memory
kill included, which no ``atexit`` or signal handler sees. The watchdog then stops the server (SIGTERM,
so vLLM shuts its engine down, then SIGKILL to the whole group after a grace period).

This is the mechanism vLLM uses for its own workers (a death pipe). ``PR_SET_PDEATHSIG`` would be
shorter, but it is Linux only and fires when the *thread* that started the child ends, not the process:
the server is restarted from a watcher thread. The pipe works on Linux and macOS alike.

Otherwise the watchdog stays out of the way: it exits with the server's status when the server exits
(so the trainer sees a crash and restarts it), and a SIGTERM sent to the group (the trainer's
:meth:`~relight_torch.vllm.server_process.VLLMServer.stop`) reaches the server, whose exit the watchdog awaits.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading

GRACE_SECONDS = 20.0
"""How long the server gets to shut down after its trainer is gone, before the group is killed."""


def _stop_when_orphaned(server: subprocess.Popen[bytes], orphaned: threading.Event) -> None:
    """Block until standard input ends (the trainer is gone), then stop the server, the group if need be."""
    while os.read(sys.stdin.fileno(), 4096):  # the trainer never writes: only the end counts
        pass
    print("relight: the process that started this vLLM server is gone; stopping the server", flush=True)
    orphaned.set()
    if server.poll() is None:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=GRACE_SECONDS)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # a server that did not stop in time


def main(command: list[str]) -> int:
    if not command:
        print("usage: python -I _watchdog.py COMMAND...", file=sys.stderr)
        return 2
    # The group's SIGTERM is the trainer stopping the server: the server handles it, this one waits.
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    orphaned = threading.Event()
    threading.Thread(target=_stop_when_orphaned, args=(server, orphaned), daemon=True).start()
    status = server.wait()
    if orphaned.is_set():  # no trainer will clean up after the server: end what it left (engine processes)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
