"""A runner process whose trainer was killed with SIGKILL (no SIGTERM reaches it) exits by itself."""

import os
import select
import signal
import subprocess
import sys

import pytest

STARTER = """
import sys, threading
from relight.runners.processes import RunnerProcesses
from relight_testing.agents import three_calls

if __name__ == "__main__":
    processes = RunnerProcesses(1, three_calls, "http://127.0.0.1:9", gateway_url="http://127.0.0.1:9", model="m")
    processes.start()
    print(processes.processes[0].pid, flush=True)
    threading.Event().wait()
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on the runner's exit with a pidfd (Linux)")
def test_a_runner_process_exits_when_the_process_that_started_it_is_killed() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    runner = int(starter.stdout.readline())
    watch = os.pidfd_open(runner)
    readable: list[int] = []
    try:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        readable, _, _ = select.select([watch], [], [], 120)  # the runner's exit, not a poll
        assert readable, "the orphaned runner process is still running"
    finally:
        os.close(watch)
        starter.stdout.close()
        if not readable:  # only when the test fails
            os.kill(runner, signal.SIGKILL)
