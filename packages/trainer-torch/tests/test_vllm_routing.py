"""How the vLLM upstream routes each policy's calls and sends calls again after a server restart, against a
scripted OpenAI server (no vLLM needed), and TorchEngine's GRPO refusing several policies."""

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import relight
from relight.scripted import Reply, ScriptedUpstream, ScriptRequest
from relight_testing.faults import free_port
from relight_torch.algorithms.grpo import GRPO
from relight_torch.models.tiny import tiny_engine
from relight_torch.vllm import VLLMUpstream

MODEL = "base-model"


def _served_name(request: ScriptRequest) -> str:
    """Replies with the model name vLLM would have been asked for."""
    return request.model


async def _ask(upstream: VLLMUpstream, model: str) -> dict[str, Any]:
    return await upstream.complete("chat", {"model": model, "messages": [{"role": "user", "content": "hi"}]})


async def test_each_policys_calls_go_to_its_current_adapter_and_report_its_version() -> None:
    retired: list[str] = []
    with ScriptedUpstream(_served_name) as server:
        upstream = VLLMUpstream(server.base_url, model=MODEL)
        try:
            upstream.route(0, MODEL, policy="writer")
            upstream.route(0, MODEL, policy="checker")
            assert upstream.policies == ["writer", "checker"]
            first = await _ask(upstream, "writer")
            assert (first["choices"][0]["message"]["content"], first["model"], first["policy_version"]) == (
                MODEL,
                "writer",
                0,
            ), "at version 0 the base model serves the policy"
            upstream.route(1, "writer@v1", policy="writer", retire=retired.append)
            upstream.route(2, "writer@v2", policy="writer", retire=retired.append)
            writer = await _ask(upstream, "writer")
            checker = await _ask(upstream, "checker")
            base = await _ask(upstream, MODEL)
            other = await _ask(upstream, "not-a-policy")
        finally:
            await upstream.aclose()
    assert (writer["choices"][0]["message"]["content"], writer["model"], writer["policy_version"]) == (
        "writer@v2",
        "writer",
        2,
    )
    assert (checker["choices"][0]["message"]["content"], checker["policy_version"]) == (MODEL, 0)
    assert (base["choices"][0]["message"]["content"], base["policy_version"]) == (MODEL, 0)
    assert other["choices"][0]["message"]["content"] == "not-a-policy", "a name no policy has goes as it is"
    assert "policy_version" not in other
    assert retired == ["writer@v1"], "the old adapter retires once no call uses it; the base model never does"
    assert upstream.current_of("writer") == (2, "writer@v2")


class _Restart:
    """Stands in for :class:`~relight_torch.vllm.VLLMServer`'s watch over its process: the server died under
    generation 0 and serves again as generation 1 once :attr:`up` is set. The first call to ask whether it
    may go again is told so at once; the second only once the first one's new request is at the server."""

    def __init__(self) -> None:
        self.generation = 0
        self.up = threading.Event()
        self.first_resent = threading.Event()
        self.asking = threading.Semaphore(0)
        self._asked = 0
        self._lock = threading.Lock()

    def recovered_since(self, generation: int, timeout: float | None = None) -> bool:
        if self.up.is_set() and generation == self.generation:
            return False  # up all along: the failure was the call's own
        with self._lock:
            self._asked += 1
            second = self._asked == 2
        self.asking.release()
        assert self.up.wait(60)
        if second:
            assert self.first_resent.wait(60)
        return True


async def test_calls_that_recover_from_one_restart_do_not_close_each_others_connections() -> None:
    """Two calls fail as the server dies; the first goes again at once, and the second recovers while the
    first's new request is still at the server: that request must be answered."""
    restart = _Restart()
    arrived = 0
    both_resent = threading.Event()

    def second_releases_first(request: ScriptRequest) -> Reply:
        nonlocal arrived
        arrived += 1
        if arrived == 1:
            restart.first_resent.set()
            assert both_resent.wait(60), "the second call never went again"
        else:
            both_resent.set()
        return Reply("ok")

    port = free_port()
    upstream = VLLMUpstream(f"http://127.0.0.1:{port}/v1", model=MODEL, server=restart)  # type: ignore[arg-type]
    try:
        calls = [asyncio.create_task(_ask(upstream, MODEL)) for _ in range(2)]
        for _ in range(2):  # both failed against the dead port and ask whether they may go again
            assert await asyncio.to_thread(restart.asking.acquire, True, 60)
        with ScriptedUpstream(second_releases_first, port=port, script_on_thread=True):
            restart.generation = 1
            restart.up.set()
            answers = await asyncio.wait_for(asyncio.gather(*calls), 120)
    finally:
        await upstream.aclose()
    assert [answer["choices"][0]["message"]["content"] for answer in answers] == ["ok", "ok"]
    assert upstream.retries == 2


@relight.rollout
async def _nothing(task: Any, llm: relight.LLM) -> float:
    return 0.0


def test_grpo_on_torch_engine_refuses_several_policies(tmp_path: Path) -> None:
    policies = {"writer": "write", "checker": "check"}
    with tiny_engine(seed=0) as engine:
        trainer = relight.Trainer(GRPO(engine), policies=policies, run_dir=tmp_path, console=Console(quiet=True))
        with pytest.raises(TypeError, match=r"trains one policy, not 2 \(writer, checker\).*vLLM engine"):
            trainer.fit(_nothing, [{"question": "q"}])
