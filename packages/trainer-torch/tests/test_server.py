from collections.abc import AsyncIterator

import openai
import pytest

from relight._server import AsgiServer
from relight.engine import GenerationRequest
from relight_torch.demo.calculator import TOOLS
from relight_torch.engine import TorchEngine
from relight_torch.server import create_app


@pytest.fixture
async def client(engine: TorchEngine) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        AsgiServer(create_app(engine)) as server,
        openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as client,
    ):
        yield client


async def test_chat_answers_with_token_ids_and_logprobs(client: openai.AsyncOpenAI, engine: TorchEngine) -> None:
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    reply = await client.chat.completions.create(
        model="relight-tiny",
        messages=messages,
        tools=TOOLS,
        max_tokens=8,
        logprobs=True,
        seed=3,  # type: ignore[arg-type]
    )
    assert reply.id.startswith("chatcmpl-")
    choice = reply.choices[0]
    ids = choice.model_extra["token_ids"]  # type: ignore[index]
    assert 0 < len(ids) <= 8
    assert choice.logprobs is not None
    assert len(choice.logprobs.content or []) == len(ids)
    assert (choice.message.content or "") == engine.tokenizer.decode(ids, skip_special_tokens=True)
    prompt = engine.prompt_ids(GenerationRequest(model="relight-tiny", messages=messages, tools=TOOLS))
    assert reply.model_extra["prompt_token_ids"] == prompt  # type: ignore[index]


async def test_streaming_gives_the_same_text_as_a_whole_reply(client: openai.AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "Hello"}]
    whole = await client.chat.completions.create(
        model="relight-tiny",
        messages=messages,
        max_tokens=6,
        temperature=0,  # type: ignore[arg-type]
    )
    stream = await client.chat.completions.create(
        model="relight-tiny",
        messages=messages,
        max_tokens=6,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == whole.choices[0].message.content


async def test_completions_and_models(client: openai.AsyncOpenAI) -> None:
    completion = await client.completions.create(model="relight-tiny", prompt="What is", max_tokens=3)
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert [model.id for model in (await client.models.list()).data] == ["relight-tiny"]


async def test_bad_requests_get_a_400_naming_the_problem(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        await client.chat.completions.create(
            model="relight-tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=100_000
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        await client.chat.completions.create(model="relight-tiny", messages="Hi")  # type: ignore[arg-type]
