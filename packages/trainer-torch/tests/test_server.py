import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest

from relight._internal.server import AsgiServer
from relight.engine import GenerationRequest
from relight_testing.faults import free_port
from relight_testing.models import server_process
from relight_torch.demo.calculator import TOOLS
from relight_torch.engine.torch_engine import EngineAbandoned, TorchEngine
from relight_torch.models import model_name, name_model
from relight_torch.models.tiny import tiny_engine
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
    # The tiny model's context is 4,096 tokens; asking past it says how to have a longer one.
    with pytest.raises(openai.BadRequestError, match=r"max_tokens must be between 1 and 40\d\d .*max_positions=N"):
        await client.chat.completions.create(
            model="relight-tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=100_000
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        await client.chat.completions.create(model="relight-tiny", messages="Hi")  # type: ignore[arg-type]
    hi: Any = [{"role": "user", "content": "Hi"}]
    for arguments, status, param in (
        ({"model": "relight-tiny", "max_tokens": 10**12}, 400, "max_tokens"),
        ({"model": openai.NOT_GIVEN}, 400, "model"),
        ({"model": {}}, 400, "model"),
        ({"model": "relight-tiny", "logprobs": "x"}, 400, "logprobs"),
        ({"model": "relight-tiny", "extra_headers": {"Content-Type": "text/plain"}}, 415, None),
    ):
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(messages=hi, **arguments)
        assert (raised.value.status_code, cast(dict[str, Any], raised.value.body)["param"]) == (status, param)


def test_the_server_process_answers_to_the_name_in_the_config_and_404s_any_other(tmp_path: Path) -> None:
    """`python -m relight_torch.server hf/` goes by its config's name, not `hf`; other names are 404 (as in vLLM)."""
    folder = tmp_path / "hf"
    with tiny_engine(seed=0) as engine:
        engine.model.save_pretrained(folder)
        engine.tokenizer.save_pretrained(folder)
    name_model(folder, "acme/sql-policy")
    port = free_port()
    command = [sys.executable, "-m", "relight_torch.server", str(folder), "--port", str(port)]
    url = f"http://127.0.0.1:{port}/v1"
    with server_process(command), openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        assert [model.id for model in client.models.list().data] == ["acme/sql-policy"]
        hello: Any = [{"role": "user", "content": "Hi"}]
        for unknown in ("hf", "no-such-model"):
            with pytest.raises(openai.NotFoundError, match=f"`{unknown}` does not exist") as refused:
                client.chat.completions.create(model=unknown, messages=hello, max_tokens=2)
            assert refused.value.body["param"] == "model"  # type: ignore[index]
        reply = client.chat.completions.create(model="acme/sql-policy", messages=hello, max_tokens=2)
        assert reply.model == "acme/sql-policy"


def test_the_server_process_says_the_model_name_and_url_it_serves_at_start_up() -> None:
    port = free_port()
    command = [sys.executable, "-m", "relight_torch.server", "tiny", "--name", "acme/calc", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        assert any("Uvicorn running on" in line for line in server.stderr)
        server.terminate()  # what start-up said comes before the shutdown's lines, then the log ends
        said = server.stderr.read()
        assert f'Serving the model "acme/calc" at http://127.0.0.1:{port}/v1' in said
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()


def test_a_folder_is_named_by_its_config_else_by_itself(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_name_or_path": str(tmp_path)}))  # a path is not a name
    assert model_name(folder) == "hf"
    name_model(folder, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert model_name(folder) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert json.loads((folder / "config.json").read_text())["_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


async def test_an_abandoned_engine_fails_the_request_it_is_sampling_after_the_step() -> None:
    """What the server's first SIGTERM does: a request with no output cap stops after the current step."""
    engine = tiny_engine(seed=0, default_max_tokens=None)
    request = GenerationRequest(messages=[{"role": "user", "content": "Count for ever"}], model=engine.name)
    try:
        answer = asyncio.ensure_future(engine.generate(request))
        while engine.steps < 3:  # sampling has begun (a condition, checked as the loop turns)
            await asyncio.sleep(0)
            assert not answer.done()
        engine.abandon()
        with pytest.raises(EngineAbandoned, match="shutting down"):
            await answer
        assert engine.tokens < engine.context_length - 100  # cut off, far from the end of the context
    finally:
        engine.close()


def test_the_first_sigterm_stops_a_busy_server() -> None:
    """``--max-tokens 0`` lifts the cap, so a request may run for minutes; one SIGTERM still stops the server."""
    port = free_port()
    command = [sys.executable, "-m", "relight_torch.server", "tiny", "--port", str(port), "--max-tokens", "0"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "Uvicorn running on" in line:
                break
        threading.Thread(target=server.stderr.read, daemon=True).start()
        url = f"http://127.0.0.1:{port}/v1"
        outcome: list[object] = []

        def ask() -> None:
            with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300) as client:
                hello: Any = [{"role": "user", "content": "Count for ever"}]
                try:
                    outcome.append(client.chat.completions.create(model="relight-tiny", messages=hello))
                except (openai.APIError, httpx.HTTPError) as error:
                    outcome.append(error)

        asking = threading.Thread(target=ask)
        asking.start()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)  # Uvicorn re-raises the signal once it has shut down
        asking.join(timeout=60)
        assert outcome  # the request ended too: answered before the signal, or cut off by it
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stderr is not None:
            server.stderr.close()
