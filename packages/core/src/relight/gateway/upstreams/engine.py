"""An in-process :class:`relight.engine.Engine` as an upstream, answering as a vLLM server would."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import cast

from relight.engine import (
    ContextLengthError,
    Engine,
    EngineRequestError,
    Generation,
    GenerationRequest,
    SamplingParams,
    TokenLogprob,
)
from relight.gateway.errors import UpstreamError
from relight.gateway.overflow import ContextOverflow
from relight.gateway.upstreams.protocol import Endpoint, Json

__all__ = ["EngineUpstream"]


class EngineUpstream:
    """An in-process :class:`relight.engine.Engine`, answering as a vLLM server would."""

    def __init__(self, engine: Engine, *, name: str = "engine") -> None:
        self.engine = engine
        self.name = name

    async def complete(self, endpoint: Endpoint, body: Json) -> Json:
        request = _generation_request(endpoint, body)
        try:
            generation = await self.engine.generate(request)
        except ContextLengthError as error:
            overflow = ContextOverflow(error.context_length, error.prompt_tokens, error.max_tokens)
            raise UpstreamError(error.message, status_code=400, param=error.param, overflow=overflow) from error
        except EngineRequestError as error:
            raise UpstreamError(error.message, status_code=error.status_code, param=error.param) from error
        except ValueError as error:  # the engine's contract for a request it cannot serve: the client's to fix
            raise UpstreamError(f"engine {self.name!r} refused the request: {error}", status_code=400) from error
        except Exception as error:
            raise UpstreamError(f"engine {self.name!r} failed: {error!r}") from error
        return _engine_response(endpoint, generation)

    async def stream(self, endpoint: Endpoint, body: Json) -> AsyncIterator[Json]:
        for chunk in _as_chunks(endpoint, await self.complete(endpoint, body)):
            yield chunk

    async def models(self) -> list[str]:
        return self.engine.models()

    async def aclose(self) -> None:
        return None


def _generation_request(endpoint: Endpoint, body: Json) -> GenerationRequest:
    stop = body.get("stop")
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        stop=(stop,) if isinstance(stop, str) else tuple(cast(list[str], stop or ())),
        seed=body.get("seed"),
    )
    model = str(body.get("model", ""))
    if endpoint == "chat":
        return GenerationRequest(
            model=model,
            messages=body["messages"],
            tools=body.get("tools"),
            sampling=sampling,
            tool_choice=body.get("tool_choice"),
            response_format=body.get("response_format"),
            top_logprobs=int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0,
        )
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise UpstreamError("an in-process engine takes a text prompt, not token ids", status_code=400, param="prompt")
    logprobs = body.get("logprobs")
    top = logprobs if isinstance(logprobs, int) and not isinstance(logprobs, bool) else 0
    return GenerationRequest(model=model, prompt=prompt, sampling=sampling, top_logprobs=top)


def _engine_response(endpoint: Endpoint, generation: Generation) -> Json:
    ids, logprobs = generation.response_token_ids, generation.response_logprobs
    usage = {
        "prompt_tokens": len(generation.prompt_token_ids),
        "completion_tokens": len(ids),
        "total_tokens": len(generation.prompt_token_ids) + len(ids),
    }
    response: Json = {"created": int(time.time()), "model": generation.model, "usage": usage}
    if generation.policy_version is not None:
        response["policy_version"] = generation.policy_version
    if generation.policy_version_segments:
        response["policy_version_segments"] = [list(segment) for segment in generation.policy_version_segments]
    if endpoint == "chat":
        message: Json = {"role": "assistant", "content": generation.text or None}
        if generation.tool_calls:
            message["tool_calls"] = generation.tool_calls
        content = [
            {**_chat_token(token), "top_logprobs": [_chat_token(top) for top in tops]}
            for token, tops in zip(_tokens(generation), _tops(generation), strict=True)
        ]
        choice: Json = {"index": 0, "message": message, "logprobs": {"content": content}, "token_ids": ids}
        response |= {
            "id": "chatcmpl-engine",
            "object": "chat.completion",
            "prompt_token_ids": generation.prompt_token_ids,
        }
    else:
        tokens = [token.token for token in _tokens(generation)]
        top = [{t.token: t.logprob for t in tops} for tops in _tops(generation)] if generation.top_logprobs else None
        completion_logprobs = {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": top, "text_offset": []}
        choice = {
            "index": 0,
            "text": generation.text,
            "logprobs": completion_logprobs,
            "token_ids": ids,
            "prompt_token_ids": generation.prompt_token_ids,
        }
        response |= {"id": "cmpl-engine", "object": "text_completion"}
    choice["finish_reason"] = generation.finish_reason
    response["choices"] = [choice]
    return response


def _tokens(generation: Generation) -> list[TokenLogprob]:
    """The sampled tokens as the engine describes them, or as ``token_id:N`` where it cannot."""
    if generation.tokens is not None:
        return generation.tokens
    pairs = zip(generation.response_token_ids, generation.response_logprobs, strict=True)
    return [TokenLogprob(f"token_id:{t}", t, [], lp) for t, lp in pairs]


def _tops(generation: Generation) -> list[list[TokenLogprob]]:
    return generation.top_logprobs or [[] for _ in generation.response_token_ids]


def _chat_token(token: TokenLogprob) -> Json:
    return {"token": token.token, "logprob": token.logprob, "bytes": token.bytes or None}


def _as_chunks(endpoint: Endpoint, response: Json) -> list[Json]:
    """A whole response cut into the stream chunks a vLLM server would have sent."""
    (choice,) = response["choices"]
    head = {key: response[key] for key in ("id", "created", "model") if key in response}
    extra = {key: response[key] for key in ("policy_version", "policy_version_segments") if key in response}
    if endpoint == "completions":
        return [
            {**head, **extra, "object": "text_completion", "choices": [choice]},
            {**head, "object": "text_completion", "choices": [], "usage": response["usage"]},
        ]
    head["object"] = "chat.completion.chunk"
    message = choice["message"]
    first: Json = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    body: Json = {
        "index": 0,
        "delta": {"content": message.get("content") or ""},
        "logprobs": choice["logprobs"],
        "finish_reason": None,
        "token_ids": choice["token_ids"],
    }
    chunks = [
        {**head, **extra, "choices": [first], "prompt_token_ids": response["prompt_token_ids"]},
        {**head, "choices": [body]},
    ]
    for index, call in enumerate(message.get("tool_calls") or ()):
        delta: Json = {"tool_calls": [{"index": index, **call}]}
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
    last: Json = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    chunks.append({**head, "choices": [last]})
    chunks.append({**head, "choices": [], "usage": response["usage"]})
    return chunks


def _number(body: Json, key: str, default: float) -> float:
    value = body.get(key)
    return default if value is None else float(value)
