"""Ctrl-C in dev mode: one true message, the running rollout stopped at once and never retried, exit status 130.

A real script runs ``Trainer.dev`` in a child process and gets a real SIGINT while one of its two
rollouts is still running (its agent waits for ever) and the other has ended.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from relight.plugins import open_store
from relight.records import RolloutStatus

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import faulthandler
    import os
    import signal
    import sys

    import relight

    # Terminated (by the test, when it hangs), it first writes every thread's stack on stderr.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)


    # Sent SIGUSR1 (by the test, when it hangs), it writes the SIGINT handler in place and where each task
    # waits on stderr, and exits.
    def show_tasks(signum, frame):
        print(f"SIGINT handler: {signal.getsignal(signal.SIGINT)!r}", file=sys.stderr)
        for task in asyncio.all_tasks():
            print(f"{task!r} cancelling={task.cancelling()}", file=sys.stderr)
            task.print_stack(file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)


    signal.signal(signal.SIGUSR1, show_tasks)


    @relight.rollout
    async def agent(task, llm):
        if task == "slow":
            print("slow agent started", flush=True)
            await asyncio.Event().wait()  # never ends by itself
        return 1.0


    relight.Trainer(store=sys.argv[1]).dev(agent, ["quick", "slow"], base_url="http://127.0.0.1:9/v1", model="m")
    """
)

SETTLE = 60.0
"""How long the test waits for what should happen at once; reached only when broken."""
PROMPT_EXIT = 10.0
"""Interrupted, dev mode stops at once: well before a runner's grace for its running attempts (20 s)."""


def _read_until(process: subprocess.Popen[str], wanted: list[str]) -> str:
    """The child's output up to the line holding each of ``wanted`` (read as it comes, never slept for)."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + SETTLE
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not all(any(text in line for line in seen) for text in wanted):
            assert selector.select(timeout=max(deadline - time.monotonic(), 0)), f"no {wanted} in {seen}"
            line = process.stdout.readline()
            assert line, f"the script ended before printing {wanted}: {seen}"
            seen.append(line)
    return "".join(seen)


def test_ctrl_c_in_dev_mode_stops_at_once_says_so_once_and_exits_130(tmp_path: Path) -> None:
    script = tmp_path / "dev_script.py"
    script.write_text(SCRIPT)
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    with subprocess.Popen(
        [sys.executable, str(script), url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    ) as process:
        before = _read_until(process, ["slow agent started", "succeeded"])
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        try:
            rest, errors = process.communicate(timeout=SETTLE)
        except subprocess.TimeoutExpired as hung:
            process.send_signal(signal.SIGUSR1)  # where it hangs: each task's stack, on its stderr
            try:
                rest, errors = process.communicate(timeout=SETTLE)
            except subprocess.TimeoutExpired:
                process.terminate()  # no Python runs on its main thread: every thread's stack instead
                rest, errors = process.communicate(timeout=SETTLE)
            said = f"{before}{rest}\n{errors}"
            raise AssertionError(f"dev mode did not stop within {SETTLE} s of Ctrl-C:\n{said}") from hung
        took = time.monotonic() - interrupted
    output = " ".join((before + rest).split())
    assert process.returncode == 130, (output, errors)
    assert took < PROMPT_EXIT, f"dev mode took {took:.1f} s to stop"
    assert "Traceback" not in errors, errors
    assert "KeyboardInterrupt" not in errors, errors
    assert output.count("interrupted") == 1, output
    assert "relight dev: interrupted; 1 of 2 rollout(s) ended; the 1 still running are stopped" in output
    assert "dev mode tries each task once and retries nothing" in output
    assert "retried" not in output + errors

    async def rollouts() -> dict[object, tuple[RolloutStatus, int]]:
        store = open_store(url)
        try:
            return {r.input: (r.status, r.attempt_count) for r in await store.list_rollouts()}
        finally:
            await store.close()

    assert asyncio.run(rollouts()) == {
        "quick": (RolloutStatus.SUCCEEDED, 1),
        "slow": (RolloutStatus.FAILED, 1),  # stopped, and never tried again
    }
