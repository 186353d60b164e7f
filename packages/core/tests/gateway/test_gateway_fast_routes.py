"""The chat and completions routes, served before Starlette (relight.gateway.http.fast_routes), answer as
Starlette would.

Their 4xx answers are tested with every other gateway test; these are the answers the hot path gives by
itself (an unforeseen failure) or leaves to Starlette (another method, a path it does not know exactly).
"""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from relight.gateway import Gateway
from relight.records import RolloutRequest
from relight.scripted import ScriptedUpstream
from relight.stores.memory import InMemoryStore

CHAT: Any = {"model": "scripted", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    store = InMemoryStore()
    await store.enqueue([RolloutRequest(input="x", rollout_id="r1")])
    claimed = await store.claim("worker")
    assert claimed is not None
    async with ScriptedUpstream() as upstream, Gateway(store, [upstream.base_url]) as gateway:
        yield gateway


async def test_an_unforeseen_failure_on_the_hot_path_is_an_openai_shaped_500(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug in the gateway")

    monkeypatch.setattr(gateway, "complete", broken)
    (attempt,) = await gateway.store.list_attempts("r1")
    key = gateway.api_key_for("r1", attempt.attempt_id)
    async with httpx.AsyncClient() as http:
        by_path = await http.post(f"{gateway.base_url_for('r1', attempt.attempt_id)}/chat/completions", json=CHAT)
        by_key = await http.post(
            f"{gateway.url}/v1/completions", json={**CHAT, "prompt": "hi"}, headers={"authorization": f"Bearer {key}"}
        )
    for reply in (by_path, by_key):
        assert reply.status_code == 500
        assert reply.headers["content-type"] == "application/json"
        assert reply.json()["error"]["code"] == "internal_error"
        assert "a bug in the gateway" in reply.json()["error"]["message"]


async def test_other_methods_and_paths_get_starlettes_answers_in_openai_shape(gateway: Gateway) -> None:
    (attempt,) = await gateway.store.list_attempts("r1")
    url = gateway.base_url_for("r1", attempt.attempt_id)
    async with httpx.AsyncClient() as http:
        wrong_method = await http.get(f"{url}/chat/completions")
        no_attempt = await http.post(f"{gateway.url}/rollouts/r1/attempts//v1/chat/completions", json=CHAT)
        deeper = await http.post(f"{url}/chat/completions/more", json=CHAT)
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert (no_attempt.status_code, deeper.status_code) == (404, 404)
    assert all(reply.json()["error"]["type"] == "invalid_request_error" for reply in (wrong_method, no_attempt, deeper))
