"""``relight runner`` as a real process against a real store server and gateway; stopped with a real SIGTERM."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from relight._internal.server import AsgiServer
from relight.cli import main
from relight.gateway import Gateway
from relight.records import RolloutRequest, RolloutStatus, SpanKind
from relight.scripted import ScriptedUpstream, ScriptRequest, echo
from relight.stores.http.server import create_app
from relight.stores.memory import InMemoryStore
from relight_testing.agents import CALLS

AGENT = "relight_testing.agents:three_calls_async"


class Hold:
    """Holds the upstream's first call of a task whose text starts with ``hold`` until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, request: ScriptRequest) -> str:
        if request.last_user.startswith("hold") and request.turn == 0:
            self.entered.set()
            self.released.wait(60)
        reply = echo(request)
        assert isinstance(reply, str)
        return reply


@dataclass
class Setup:
    store: InMemoryStore
    store_url: str
    gateway: Gateway
    hold: Hold


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, Hold]]:
    hold = Hold()
    with ScriptedUpstream(hold) as upstream:  # on a thread of its own: the hold blocks only it
        yield upstream, hold
        hold.released.set()


@pytest.fixture
async def setup(upstream: tuple[ScriptedUpstream, Hold]) -> AsyncIterator[Setup]:
    store = InMemoryStore()
    async with AsgiServer(create_app(store)) as server, Gateway(store, [upstream[0].base_url]) as gateway:
        yield Setup(store, server.url, gateway, upstream[1])


async def _runner(setup: Setup, *extra: str) -> asyncio.subprocess.Process:
    command = ["-m", "relight.cli", "runner", "--store", setup.store_url, "--gateway", setup.gateway.url, *extra]
    return await asyncio.create_subprocess_exec(
        sys.executable, *command, AGENT, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "500"}
    )


async def _line_with(process: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    assert process.stderr is not None
    while line := (await asyncio.wait_for(process.stderr.readline(), 60)).decode():
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"the runner exited without printing {text!r}:\n{''.join(seen)}")


async def test_runs_rollouts_and_a_sigterm_lets_running_attempts_finish(setup: Setup) -> None:
    runner = await _runner(setup, "--model", "scripted", "--concurrency", "4", "--health-seconds", "0.2")
    seen: list[str] = []
    try:
        await _line_with(runner, "ready: agent " + AGENT, seen)
        done = await setup.store.enqueue([RolloutRequest(input={"text": f"t{i}"}) for i in range(6)])
        finished = await setup.store.wait([r.rollout_id for r in done], timeout=60)
        assert [r.status for r in finished] == [RolloutStatus.SUCCEEDED] * 6

        (held,) = await setup.store.enqueue([RolloutRequest(input={"text": "hold"})])
        await asyncio.to_thread(setup.hold.entered.wait, 60)
        await _line_with(runner, "running 1, claimed 7, succeeded 6", seen)  # the health line
        runner.send_signal(signal.SIGTERM)
        await _line_with(runner, "SIGTERM, finishing running attempts", seen)
        (late,) = await setup.store.enqueue([RolloutRequest(input={"text": "late"})])
        setup.hold.released.set()
        stopped = await _line_with(runner, "stopped:", seen)
        assert await asyncio.wait_for(runner.wait(), 60) == 0
    finally:
        if runner.returncode is None:
            runner.kill()
            await runner.wait()

    assert "running 0, claimed 7, succeeded 7, failed 0" in stopped
    assert (await setup.store.get_rollout(held.rollout_id)).status is RolloutStatus.SUCCEEDED
    await setup.gateway.flush()
    spans = await setup.store.query_spans(held.rollout_id)
    assert [span.kind for span in spans].count(SpanKind.LLM) == CALLS
    # Not run once stopping. The runner cancels its long-poll claim on SIGTERM; should `late` reach the
    # server's poll before the hang-up does, that claim's lease holds it (never run) until it expires.
    assert (await setup.store.get_rollout(late.rollout_id)).status in (RolloutStatus.QUEUED, RolloutStatus.RUNNING)
    assert await setup.store.query_spans(late.rollout_id) == []


async def test_a_second_sigterm_leaves_at_once(setup: Setup) -> None:
    runner = await _runner(setup, "--model", "scripted", "--health-seconds", "0")
    seen: list[str] = []
    try:
        await _line_with(runner, "ready:", seen)
        (held,) = await setup.store.enqueue([RolloutRequest(input={"text": "hold"}, max_attempts=2)])
        await asyncio.to_thread(setup.hold.entered.wait, 60)
        runner.send_signal(signal.SIGTERM)
        await _line_with(runner, "finishing running attempts", seen)
        runner.send_signal(signal.SIGTERM)
        await _line_with(runner, "SIGTERM again, leaving now", seen)
        assert await asyncio.wait_for(runner.wait(), 60) == 0
    finally:
        setup.hold.released.set()
        if runner.returncode is None:
            runner.kill()
            await runner.wait()
    (attempt,) = await setup.store.list_attempts(held.rollout_id)
    assert attempt.status.value == "running"  # abandoned to its lease, which another runner's claim reaps


def test_help_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["runner", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    for text in ("--store", "--gateway", "--concurrency", "SIGTERM", "module:name"):
        assert text in shown
    assert main(["runner", "--store", "memory://", "--gateway", "http://127.0.0.1:1", "no_colon"]) == 1
    assert "import path like my_package.agents:sql_agent" in capsys.readouterr().err
    assert main(["runner", "--store", "memory://", "--gateway", "http://x", "relight_nowhere:agent"]) == 1
    assert "cannot import agent 'relight_nowhere:agent'" in capsys.readouterr().err
    assert main(["runner", "--store", "memory://", AGENT]) == 1
    assert "no gateway given" in capsys.readouterr().err
    assert main(["runner", "--store", "memory://", "--gateway", "http://x", AGENT]) == 1
    assert "no --model given" in capsys.readouterr().err
