"""Dev mode cannot hang on a model that never stops: its output cap ends the call, its timeout the rollout.

The upstream is a real OpenAI-compatible server on 127.0.0.1 that generates for ever unless the
request caps its output: the model a framework that sends no ``max_tokens`` meets when the model
folder sets no cap either.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import openai
import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relight import Trainer
from relight._internal.server import AsgiServer
from relight.agent import LLM, rollout
from relight.records import RolloutStatus


async def endless_chat(request: Request) -> Response:
    """Answers with ``max_tokens`` tokens, cut for length; without a cap it never answers."""
    body: dict[str, Any] = json.loads(await request.body())
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    if not cap:
        await asyncio.Event().wait()  # generating for ever; ends only when the server stops
    message = {"role": "assistant", "content": "la" * int(cap)}
    choice = {"index": 0, "message": message, "finish_reason": "length", "token_ids": [7] * int(cap)}
    return JSONResponse(
        {  # vLLM's dialect: the token ids come with the answer, so nothing has to retokenize it
            "id": "chatcmpl-endless",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "endless"),
            "prompt_token_ids": [1, 2, 3],
            "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": int(cap), "total_tokens": 3 + int(cap)},
        }
    )


@pytest.fixture
async def endless() -> AsyncIterator[str]:
    async with AsgiServer(Starlette(routes=[Route("/v1/chat/completions", endless_chat, methods=["POST"])])) as server:
        yield server.url + "/v1"


@rollout
async def chatty(task: Mapping[str, Any], llm: LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": str(task)}])
    return 1.0


async def test_a_call_without_max_tokens_gets_the_dev_cap(endless: str, tmp_path: Path) -> None:
    output = io.StringIO()
    trainer = Trainer(store=f"sqlite:///{tmp_path / 'dev.db'}", console=Console(file=output, width=80))
    (result,) = await trainer.adev(chatty, ["sing"], base_url=endless, model="endless", vllm=True, max_tokens=16)
    assert (result.rollout.status, result.reward, result.calls) == (RolloutStatus.SUCCEEDED, 1.0, 1)


async def test_a_rollout_that_never_ends_fails_at_its_timeout_with_a_row_saying_so(
    endless: str, tmp_path: Path
) -> None:
    output = io.StringIO()
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    trainer = Trainer(store=url, console=Console(file=output, width=80))
    (result,) = await trainer.adev(
        chatty, ["sing"], base_url=endless, model="endless", vllm=True, max_tokens=None, timeout=1.0
    )
    assert result.rollout.status is RolloutStatus.FAILED
    assert result.rollout.attempt_count == 1
    printed = output.getvalue()
    assert max(len(line) for line in printed.splitlines()) <= 80
    unwrapped = "".join(printed.split())
    assert result.rollout.rollout_id in unwrapped  # the row, with the id whole
    assert "ranpastitstimeoutof1.0s" in unwrapped  # and the reason
    assert f"rolloutskeptin{url}" in unwrapped
