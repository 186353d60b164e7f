"""How the vLLM upstream routes each policy's calls, against a scripted OpenAI server (no vLLM needed), and
TorchEngine's GRPO refusing several policies."""

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import relight
from relight.scripted import ScriptedUpstream, ScriptRequest
from relight_torch.grpo import GRPO
from relight_torch.tiny import tiny_engine
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


@relight.rollout
async def _nothing(task: Any, llm: relight.LLM) -> float:
    return 0.0


def test_grpo_on_torch_engine_refuses_several_policies(tmp_path: Path) -> None:
    policies = {"writer": "write", "checker": "check"}
    with tiny_engine(seed=0) as engine:
        trainer = relight.Trainer(GRPO(engine), policies=policies, run_dir=tmp_path, console=Console(quiet=True))
        with pytest.raises(TypeError, match=r"trains one policy, not 2 \(writer, checker\).*vLLM engine"):
            trainer.fit(_nothing, [{"question": "q"}])
