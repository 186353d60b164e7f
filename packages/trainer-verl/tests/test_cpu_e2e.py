"""relight-verl end to end on the CPU: verl's trainer, FSDP worker, weight sync and checkpoints for real.

``Trainer(algorithm=VerlAlgorithm(device="cpu", ...)).fit(agent, tasks)`` with relight-torch's tiny
model: verl's Ray worker wraps it in FSDP (gloo), a vLLM server (vLLM's CPU build, from ``.venv-vllm``)
serves it behind relight's gateway, and after every GRPO step verl's weight sync writes the actor's
weights and vLLM reloads them. The served weights are read back from the vLLM server after each update
(its logprobs of a fixed answer), so a broken update (no learning) or a broken sync (stale weights
served) fails the test.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest
from rich.console import Console

import relight
from relight import semconv
from relight.records import Transition
from relight_torch.vllm import vllm_python
from relight_verl import VerlAlgorithm

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it"),
]

TASKS = ["What is 2 + 3?", "Say hi.", "Name a colour."]
PROBE = "What is 7 + 8?"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """relight-torch's tiny Llama and tokenizer, saved as a Hugging Face folder verl and vLLM load.

    Four heads of 32: vLLM's CPU attention takes head sizes from 32 up."""
    from relight_torch.models.tiny import tiny_model, tiny_tokenizer

    directory = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    tiny_model(tokenizer, seed=0, num_heads=4).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture
def algorithm(tiny_llama: Path, tmp_path: Path) -> Iterator[VerlAlgorithm]:
    algorithm = VerlAlgorithm(
        device="cpu",
        model=str(tiny_llama),
        served_model_name="tiny",
        mini_batch_size=4,
        micro_batch_size_per_gpu=4,
        max_prompt_length=64,
        max_response_length=12,
        lr=1e-2,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        save_every=2,
        resume="disable",
        loggers=(),
        overrides=("ray_kwargs.ray_init.num_cpus=4", "actor_rollout_ref.actor.optim.weight_decay=0"),
    )
    try:
        yield algorithm
    finally:
        algorithm.close()


@relight.rollout
async def agent(task: str, llm: relight.LLM) -> float:
    """An unchanged OpenAI-client agent; any reward that varies within a group gives GRPO a signal."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task}], max_tokens=12
        )
    return len(reply.choices[0].message.content or "") / 48


class ServedPolicy:
    """Reads the served weights back from the vLLM server (its logprobs of given tokens) around updates."""

    def __init__(self, algorithm: VerlAlgorithm) -> None:
        (self.upstream,) = algorithm.upstreams()
        self.tokenizer = algorithm._started().tokenizer  # pyright: ignore[reportPrivateUsage]
        self.probes = [self.probe()]
        """The probe's logprobs before training and after each update."""
        self.gains: list[float] = []
        """Per update: sum over its transitions of (reward - group mean) x (served logprob after - sampled logprob)."""
        update = algorithm.update

        async def update_and_read(transitions: Sequence[Transition]) -> Mapping[str, float]:
            metrics = await update(transitions)
            self.probes.append(self.probe())
            self.gains.append(self.gain(transitions))
            return metrics

        algorithm.update = update_and_read  # type: ignore[method-assign]

    def logprobs(self, prompt_ids: list[int], response_ids: list[int]) -> list[float]:
        """vLLM's logprobs of ``response_ids`` after ``prompt_ids``, from the version it serves now."""
        answer = httpx.post(
            f"{self.upstream.name}/completions",
            json={
                "model": self.upstream.current[1],
                "prompt": prompt_ids + response_ids,
                "max_tokens": 1,
                "prompt_logprobs": 0,
            },
            timeout=120,
        )
        answer.raise_for_status()
        scored = answer.json()["choices"][0]["prompt_logprobs"][len(prompt_ids) :]
        return [entry[str(token)]["logprob"] for entry, token in zip(scored, response_ids, strict=True)]

    def probe(self) -> list[float]:
        """A fixed answer to a fixed prompt."""
        messages = [{"role": "user", "content": PROBE}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        encode = self.tokenizer.encode
        return self.logprobs(encode(text, add_special_tokens=False), encode("15", add_special_tokens=False))

    def gain(self, transitions: Sequence[Transition]) -> float:
        """Positive when the update moved the served policy towards the group's better answers (GRPO's aim)."""
        groups: dict[str, list[float]] = {}
        for transition in transitions:
            groups.setdefault(transition.group_id, []).append(transition.reward)
        total = 0.0
        for transition in transitions:
            advantage = transition.reward - statistics.fmean(groups[transition.group_id])
            after = sum(self.logprobs(transition.prompt_token_ids, transition.response_token_ids))
            total += advantage * (after - sum(transition.response_logprobs or []))
        return total


def test_fit_trains_syncs_and_checkpoints_with_verl_on_the_cpu(algorithm: VerlAlgorithm, tmp_path: Path) -> None:
    algorithm.start()
    served = ServedPolicy(algorithm)
    trainer = relight.Trainer(algorithm=algorithm, batch_size=1, n_samples=4, console=Console(file=io.StringIO()))

    history = trainer.fit(agent, TASKS)

    assert [entry["policy_version"] for entry in history] == [1, 2, 3]
    for entry in history:
        assert entry["relight/trained"] + entry["relight/dropped"] == 4
        assert entry["relight/retokenized"] == 0  # vLLM's own token ids and logprobs, recorded by the gateway
        assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/grad_norm"} <= entry.keys()
    # Every update changed the actor and verl's weight sync changed what is served (no weight decay or KL
    # term here: only the advantages move the weights). The first update, before Adam has momentum,
    # moved the served policy towards the better answers of its group.
    for before, after in itertools.pairwise(served.probes):
        assert after != pytest.approx(before, abs=1e-5)
    assert served.gains[0] > 0

    lines = [json.loads(line) for line in (tmp_path / "checkpoints" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(
        {"actor/pg_loss", "actor/lr", "timing_s/update_actor", "timing_s/update_weights"} <= line.keys()
        for line in lines
    )

    # save_every=2 saved step 2 in verl's layout while the server slept; loading it serves step 2's weights again.
    assert (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "2"
    algorithm.load(tmp_path / "checkpoints")
    assert algorithm.policy_version == 2
    assert served.probe() == pytest.approx(served.probes[2], abs=1e-5)

    server = served.upstream.server
    assert server is not None
    pid = server.pid
    assert pid is not None
    algorithm.close()  # stops the vLLM server this process started
    assert not psutil.pid_exists(pid)


def test_a_stopped_fit_resumes_through_verls_resume_path_with_relights_step_beside_it(
    tiny_llama: Path, tmp_path: Path
) -> None:
    """The run stops in its second update; the same fit again loads step 1 through verl's own resume as verl
    starts (``resume_mode=resume_path``), and relight's checkpoint manifest gives the step and task position."""

    def made() -> VerlAlgorithm:
        return VerlAlgorithm(
            device="cpu",
            model=str(tiny_llama),
            served_model_name="tiny",
            mini_batch_size=4,
            micro_batch_size_per_gpu=4,
            max_prompt_length=64,
            max_response_length=12,
            lr=1e-2,
            checkpoint_dir=str(tmp_path / "verl"),
            resume="disable",
            loggers=(),
            overrides=("ray_kwargs.ray_init.num_cpus=4",),
        )

    run_dir = tmp_path / "run"
    stopping = made()
    update = stopping.update

    async def stop_in_the_second(transitions: Sequence[Transition]) -> Mapping[str, float]:
        if stopping.policy_version == 1:
            raise RuntimeError("the trainer stops here")
        return await update(transitions)

    stopping.update = stop_in_the_second  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="stops here"):
            relight.Trainer(
                stopping, batch_size=1, n_samples=4, run_dir=run_dir, console=Console(file=io.StringIO())
            ).fit(agent, TASKS)
    finally:
        stopping.close()

    resumed = made()
    output = io.StringIO()
    try:
        history = relight.Trainer(
            resumed, batch_size=1, n_samples=4, run_dir=run_dir, console=Console(file=output)
        ).fit(agent, TASKS)
        assert resumed.config.resume == (run_dir / "checkpoints" / "step-1" / "global_step_1").resolve()
        assert resumed.policy_version == 3
    finally:
        resumed.close()
    assert "from step 1" in output.getvalue()
    assert [entry["step"] for entry in history] == [1, 2, 3]
    assert [entry["policy_version"] for entry in history] == [1, 2, 3]


def test_a_lora_actor_is_served_as_one_vllm_adapter_per_version(tiny_llama: Path, tmp_path: Path) -> None:
    """With ``lora_rank`` the actor trains peft adapters and verl syncs them unmerged: vLLM serves each
    version as an adapter of its own, calls go to the newest, and the older ones are unloaded."""
    algorithm = VerlAlgorithm(
        device="cpu",
        model=str(tiny_llama),
        served_model_name="tiny",
        mini_batch_size=4,
        micro_batch_size_per_gpu=4,
        max_prompt_length=64,
        max_response_length=12,
        lr=5e-2,
        lora_rank=8,
        lora_alpha=16,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        resume="disable",
        loggers=(),
        overrides=("ray_kwargs.ray_init.num_cpus=4", "actor_rollout_ref.actor.optim.weight_decay=0"),
    )
    try:
        algorithm.start()
        served = ServedPolicy(algorithm)
        assert served.upstream.current == (0, "policy-v0")
        history = relight.Trainer(
            algorithm=algorithm, batch_size=1, n_samples=4, console=Console(file=io.StringIO())
        ).fit(agent, TASKS[:2])
        assert [entry["policy_version"] for entry in history] == [1, 2]
        assert served.upstream.current == (2, "policy-v2")
        for before, after in itertools.pairwise(served.probes):
            assert after != pytest.approx(before, abs=1e-5)
        models = httpx.get(f"{served.upstream.name}/models", timeout=30).json()
        assert {model["id"] for model in models["data"]} == {"tiny", "policy-v2"}  # v0 and v1 unloaded
    finally:
        algorithm.close()


_CRASH: list[Any] = []
"""The server the next episode kills between its two calls (once)."""


@relight.rollout
async def agent_across_a_crash(task: str, llm: relight.LLM) -> float:
    """Two calls per episode; the server may be SIGKILLed between them (:data:`_CRASH`)."""
    text = ""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        for _ in range(2):
            reply = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task}], max_tokens=12
            )
            text += reply.choices[0].message.content or ""
            if _CRASH:
                _CRASH.pop().crash()
    return len(text) / 96


def test_a_vllm_server_killed_mid_step_comes_back_serving_the_current_weights(
    algorithm: VerlAlgorithm, tmp_path: Path
) -> None:
    """After the first update the server serves version 1's weights; killed in the second step, it is
    restarted from them (not from the base model), the episodes in flight go on, and nothing is recorded twice."""
    algorithm.start()
    served = ServedPolicy(algorithm)
    server = served.upstream.server
    assert server is not None
    after_restart: list[list[float]] = []
    update = algorithm.update

    async def crash_in_the_second_step(transitions: Sequence[Transition]) -> Mapping[str, float]:
        if algorithm.policy_version == 1:  # the second step's calls are done: read what the restarted server serves
            after_restart.append(served.probe())
        metrics = await update(transitions)
        if algorithm.policy_version == 1:
            _CRASH[:] = [server]
        return metrics

    algorithm.update = crash_in_the_second_step  # type: ignore[method-assign]
    store = f"sqlite:///{tmp_path / 'store.db'}"
    try:
        trainer = relight.Trainer(
            algorithm=algorithm, store=store, batch_size=1, n_samples=4, console=Console(file=io.StringIO())
        )
        history = trainer.fit(agent_across_a_crash, TASKS[:2])
    finally:
        _CRASH.clear()
    spans = asyncio.run(_llm_spans(store))

    assert server.restarts == 1
    assert served.upstream.retries >= 1, "the calls in flight when the server died went again"
    assert [entry["policy_version"] for entry in history] == [1, 2]
    for entry in history:  # two calls in each of four episodes, none lost
        assert entry["relight/trained"] + entry["relight/dropped"] == 8
    assert after_restart[0] == pytest.approx(served.probes[1], abs=1e-5), "restarted with version 1's weights"
    assert after_restart[0] != pytest.approx(served.probes[0], abs=1e-5)
    assert len(spans) == 16  # two calls in each of eight episodes, none recorded twice
    assert len({span.attributes[semconv.GEN_AI_RESPONSE_ID] for span in spans}) == 16


async def _llm_spans(url: str) -> list[relight.Span]:
    store = relight.open_store(url)
    try:
        rollouts = await store.list_rollouts()
        spans = [span for rollout in rollouts for span in await store.query_spans(rollout.rollout_id)]
    finally:
        await store.close()
    return [span for span in spans if semconv.RESPONSE_TOKEN_IDS in span.attributes]
