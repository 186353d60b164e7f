"""Requests checked with OpenAI's own rules before any upstream sees them: a JSON body, a model, messages
and sampling parameters in their ranges (:func:`check_request`; relight_torch's engine server checks with it too).

A bad value must be the client's 4xx naming the parameter, as OpenAI answers it: passed on, an
in-process engine fails with a 502 (which the OpenAI client retries twice) or, worse, quietly
samples something else (temperature NaN as greedy, infinity as uniform), and the recorded span
claims a setting that never took effect. Only what OpenAI itself rejects is rejected here; fields
this module does not know are left to the upstream.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from relight.gateway.errors import GatewayError

__all__ = ["check_content_type", "check_messages", "check_model", "check_request", "check_sampling"]

Json = dict[str, Any]

_NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
_POSITIVE_INTEGERS = ("max_tokens", "max_completion_tokens")
_INT64 = 2**63
_MAX_STOPS = 4
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _bad(param: str, message: str) -> GatewayError:
    return GatewayError(400, f"{param}: {message}", param=param, code="invalid_value")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_content_type(content_type: str | None) -> None:
    """Raise GatewayError (415) for a body declared as anything but JSON (``application/json``, ``…+json``).

    A request that declares no type is read as JSON: many small clients send none.
    """
    if content_type is None:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    raise GatewayError(
        415,
        f"content-type: request bodies are read as JSON (application/json), got {content_type!r}",
        code="unsupported_media_type",
    )


def check_request(endpoint: Literal["chat", "completions"], body: Json) -> None:
    """Raise GatewayError (400, naming the field) for a chat or completions request that cannot be served
    faithfully: no model, no messages (or prompt), a message or sampling parameter OpenAI would refuse, ``n``
    other than 1 (one recorded choice per call)."""
    check_model(body)
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise GatewayError(400, "'messages' is required: a non-empty list of chat messages", param="messages")
        check_messages(messages)  # pyright: ignore[reportUnknownArgumentType]
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str | list) or not prompt:
            raise GatewayError(400, "'prompt' is required: a string or a list of token ids", param="prompt")
    if body.get("n") not in (None, 1):
        raise GatewayError(
            400, f"n={body.get('n')!r}: the gateway records one choice per call; make n calls instead", param="n"
        )
    check_sampling(body, endpoint)


def check_model(body: Json) -> None:
    """Raise GatewayError (400, ``param: "model"``) unless the request names its model, as OpenAI requires."""
    model = body.get("model")
    if model is None:
        raise _bad("model", "is required: the name of the model to call (a string)")
    if not isinstance(model, str) or not model:
        raise _bad("model", f"must be a model's name (a non-empty string), got {model!r}")


def check_sampling(body: Json, endpoint: Literal["chat", "completions"] = "chat") -> None:
    """Raise GatewayError (400, naming the parameter) for a sampling parameter OpenAI would refuse.

    ``logprobs`` is a boolean in a chat request and a count (0 to 20) in a completions request.
    """
    for name, (low, high) in _NUMBER_RANGES.items():
        value = body.get(name)
        if value is None:
            continue
        if not _is_number(value) or not math.isfinite(value) or not low <= value <= high:
            raise _bad(name, f"must be a number from {low:g} to {high:g}, got {value!r}")
    for name in _POSITIVE_INTEGERS:
        value = body.get(name)
        if value is not None and not (_is_integer(value) and 1 <= value < _INT64):
            raise _bad(name, f"must be a positive integer, got {value!r}")
    seed = body.get("seed")
    if seed is not None and not (_is_integer(seed) and -_INT64 <= seed < _INT64):
        raise _bad("seed", f"must be an integer (64-bit), got {seed!r}")
    _check_stop(body.get("stop"))
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {stream!r}")
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("stream_options", f"must be an object, got {options!r}")
        include = options.get("include_usage")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if include is not None and not isinstance(include, bool):
            raise _bad("stream_options.include_usage", f"must be true or false, got {include!r}")
    _check_logprobs(body, endpoint)
    _check_tools(body.get("tools"))


def _check_logprobs(body: Json, endpoint: Literal["chat", "completions"]) -> None:
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if endpoint == "chat" and not isinstance(logprobs, bool):
            raise _bad("logprobs", f"must be true or false, got {logprobs!r}")
        if endpoint == "completions" and not (_is_integer(logprobs) and 0 <= logprobs <= 20):
            raise _bad("logprobs", f"must be an integer from 0 to 20, got {logprobs!r}")
    top_logprobs = body.get("top_logprobs")
    if top_logprobs is not None and not (_is_integer(top_logprobs) and 0 <= top_logprobs <= 20):
        raise _bad("top_logprobs", f"must be an integer from 0 to 20, got {top_logprobs!r}")


def _check_stop(stop: object) -> None:
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or len(stop) > _MAX_STOPS:  # pyright: ignore[reportUnknownArgumentType]
        raise _bad("stop", f"must be a string or a list of up to {_MAX_STOPS} strings, got {stop!r}")
    for index, item in enumerate(stop):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        if not isinstance(item, str):
            raise _bad(f"stop.{index}", f"must be a string, got {item!r}")


def _check_tools(tools: object) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _bad("tools", f"must be a list of tools, got {tools!r}")
    for index, tool in enumerate(tools):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise _bad(where, f"must be an object, got {tool!r}")
        if tool.get("type") != "function":  # pyright: ignore[reportUnknownMemberType]
            raise _bad(f"{where}.type", f"must be 'function', got {tool.get('type')!r}")  # pyright: ignore[reportUnknownMemberType]
        function = tool.get("function")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if not isinstance(function, dict):
            raise _bad(f"{where}.function", f"must be an object with a 'name', got {function!r}")
        name = function.get("name")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _bad(f"{where}.function.name", f"must be 1-64 letters, digits, '_' or '-', got {name!r}")
        parameters = function.get("parameters")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if parameters is not None and not isinstance(parameters, dict):
            raise _bad(f"{where}.function.parameters", f"must be a JSON Schema object, got {parameters!r}")


def check_messages(messages: list[Any]) -> None:
    """Raise GatewayError (400) for a chat message OpenAI would refuse: an unknown role, or content that is
    neither a string, a list of content parts nor (for an assistant message) null."""
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or "role" not in message:
            raise _bad(where, "must be an object with a 'role'")
        role = message["role"]  # pyright: ignore[reportUnknownVariableType]
        if role not in _ROLES:
            raise _bad(f"{where}.role", f"must be one of {', '.join(sorted(_ROLES))}, got {role!r}")
        content = message.get("content")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(content, str):
            continue
        if content is None:
            if role not in ("assistant", "function"):
                raise _bad(f"{where}.content", f"is required for a {role!r} message")
            continue
        if not isinstance(content, list):
            raise _bad(f"{where}.content", f"must be a string or a list of content parts, got {content!r}")
        for part_index, part in enumerate(content):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):  # pyright: ignore[reportUnknownMemberType]
                raise _bad(f"{where}.content.{part_index}", f"must be an object with a 'type', got {part!r}")
