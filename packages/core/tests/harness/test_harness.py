"""relight.harness with a stand-in CLI (a Python script): the sandbox, the time limit, what the reward gets.

The real CLIs (Codex CLI, Claude Code) run through it in tests/examples/test_coding_agent.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from relight import semconv
from relight.agent import LLM
from relight.gateway import Gateway
from relight.harness import CliHarness, HarnessError, run_cli
from relight.records import RolloutRequest, Span
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore


def _namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_namespaces = pytest.mark.skipif(
    not _namespaces_work(), reason="unshare --net cannot make a network namespace on this machine"
)

SCRIPT = r"""
import json, os, socket, sys, urllib.request
try:
    socket.create_connection(("192.0.2.7", 443), timeout=2)
    outside = "reached"
except OSError as error:
    outside = type(error).__name__
request = urllib.request.Request(
    os.environ["FAKE_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["FAKE_KEY"], "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request, timeout=30))
open("answer.txt", "w").write(reply["choices"][0]["message"]["content"])
print("outside:", outside, "home:", os.environ["HOME"], "leaked:", "SECRET_OF_THE_USER" in os.environ)
sys.exit(3)
"""


@dataclass(frozen=True)
class FakeCli:
    """A CLI that tries the internet, calls the gateway with the settings it was given, and writes a file."""

    script: str = SCRIPT
    name: str = "fake"

    def command(self, prompt: str) -> list[str]:
        return [sys.executable, "-c", self.script, prompt]

    def configure(self, home: Path, llm: LLM) -> dict[str, str]:
        (home / "settings.json").write_text(llm.base_url)
        return {"FAKE_BASE_URL": llm.base_url, "FAKE_KEY": llm.api_key}


@dataclass
class Setup:
    store: InMemoryStore
    gateway: Gateway
    llm: LLM
    rollout_id: str
    attempt_id: str

    async def spans(self) -> list[Span]:
        await self.gateway.flush()
        return await self.store.query_spans(self.rollout_id, self.attempt_id)


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="task")])
    claimed = await store.claim("worker")
    assert claimed is not None
    rollout_id, attempt_id = claimed[0].rollout_id, claimed[1].attempt_id
    async with (
        ScriptedUpstream(lambda _request: "hello from the model") as upstream,
        Gateway(store, [upstream.base_url]) as gateway,
    ):
        # The key-scoped root URL: the CLI reaches the gateway by its port and names the attempt by key.
        llm = LLM(f"{gateway.url}/v1", gateway.api_key_for(rollout_id, attempt_id), "scripted")
        yield Setup(store, gateway, llm, rollout_id, attempt_id)


@needs_namespaces
async def test_an_isolated_cli_reaches_the_gateway_and_nothing_else(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_OF_THE_USER", "x")
    result = await run_cli(FakeCli(), "go", setup.llm, workdir=tmp_path / "work", home=tmp_path / "home")
    assert result.isolation == {
        "devices": ["lo"],
        "outside_probe": "192.0.2.1:80 -> ENETUNREACH",
        "isolated": True,
    }
    assert result.exit_code == 3
    assert not result.timed_out
    assert result.stdout.split() == ["outside:", "OSError", "home:", str(tmp_path / "home"), "leaked:", "False"]
    assert result.files == {"answer.txt": "hello from the model"}
    (span,) = await setup.spans()
    assert span.attributes[semconv.PROMPT_TOKEN_IDS]
    assert span.attributes[semconv.RESPONSE_TOKEN_IDS]
    # Inside, the gateway is at 127.0.0.1 on its own port: the CLI's settings name that address.
    assert (tmp_path / "home" / "settings.json").read_text() == setup.llm.base_url.replace(
        setup.gateway.host, "127.0.0.1"
    )


@needs_namespaces
async def test_a_cli_past_its_time_limit_is_killed_with_everything_it_started(setup: Setup, tmp_path: Path) -> None:
    marker = tmp_path / "work" / "late.txt"
    script = f"import subprocess, time; subprocess.Popen(['sh', '-c', 'sleep 5; touch {marker}']); time.sleep(60)"
    started = time.monotonic()
    result = await run_cli(
        FakeCli(script), "go", setup.llm, workdir=tmp_path / "work", home=tmp_path / "home", timeout=2
    )
    assert result.timed_out
    assert result.exit_code is None
    assert time.monotonic() - started < 30
    await asyncio.sleep(6)  # the grandchild would have written its file by now, had it survived the kill
    assert not marker.exists()


async def test_on_the_host_network_isolation_is_not_reported(setup: Setup, tmp_path: Path) -> None:
    result = await run_cli(
        FakeCli(), "go", setup.llm, workdir=tmp_path / "work", home=tmp_path / "home", network="host"
    )
    assert result.isolation is None
    assert result.files == {"answer.txt": "hello from the model"}


async def test_a_cli_that_is_not_installed_is_a_clear_error(setup: Setup, tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Missing(FakeCli):
        def command(self, prompt: str) -> list[str]:
            return ["no-such-coding-cli", prompt]

    with pytest.raises(HarnessError, match="'no-such-coding-cli' is not an executable here"):
        await run_cli(Missing(), "go", setup.llm, workdir=tmp_path / "w", home=tmp_path / "h")


@needs_namespaces
async def test_the_harness_agent_starts_each_rollout_in_a_fresh_folder_and_rewards_what_it_left(
    setup: Setup,
) -> None:
    seen: list[dict[str, str]] = []

    def reward(task: object, result: object) -> float:
        files = getattr(result, "files")  # noqa: B009
        seen.append(files)
        return 1.0 if files.get("answer.txt") == "hello from the model" else 0.0

    agent = CliHarness(FakeCli(), prompt=str, files=lambda task: {"given.txt": str(task)}, reward=reward, timeout=60)
    assert await agent.rollout("task one", setup.llm) == 1.0
    assert seen == [{"answer.txt": "hello from the model", "given.txt": "task one"}]
