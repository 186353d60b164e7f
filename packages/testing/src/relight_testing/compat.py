"""The compatibility kit: every real client × feature through a relight gateway in front of a real engine.

An engine or upstream proves itself with one subclass that serves it behind a gateway (see
:func:`serve_policy`) in a ``policy`` fixture, ideally session-scoped so one model serves the
whole suite::

    from relight_testing.compat import ClientCompatibility, serve_policy

    class TestMyEngine(ClientCompatibility):
        @pytest.fixture(scope="class")
        def policy(self):
            with serve_policy([my_engine], reference=MyReference(), model="my-model") as policy:
                yield policy

Each test drives a real client (the ``openai`` client here; the frameworks in
:mod:`relight_testing.compat_frameworks`) and then holds the call's LLM span to what makes it
trainable (:func:`check_span`): status OK, prompt ids equal to the chat template's rendering of
the messages the client sent, response ids that decode to the text the client got, one logprob per
response id (or the span marked retokenized, with none), usage that counts those ids, and the
end-of-turn token last when the model stopped by itself. Options an engine cannot honour must come
back as a 4xx naming the option, never as a silent 200.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall
from openai.types.chat.chat_completion import Choice

from relight import semconv
from relight.algorithm import UpstreamTarget
from relight.gateway import Gateway, Upstream
from relight.records import RolloutRequest, Span, SpanKind
from relight.stores.memory import InMemoryStore
from relight.tracing.context import AttemptRef

__all__ = [
    "ADD_TOOL",
    "ClientCompatibility",
    "Policy",
    "Reference",
    "check_llm_span",
    "check_recorded_span",
    "check_span",
    "serve_policy",
]

Json = dict[str, Any]

ADD_TOOL: Json = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
"""The tool the kit offers."""

QUESTION: list[Json] = [{"role": "user", "content": "What is 2 + 3? Answer in one short sentence."}]
SHORT = 12
"""Tokens per answer: enough to see an answer, few enough to keep a CPU model quick."""
GREEDY: Json = {"temperature": 0}
"""For clients whose signature no longer takes ``temperature`` (``anthropic`` 2): sent as an extra field."""


class Reference(Protocol):
    """What the served model's own tokenizer says, to hold spans to."""

    end_of_turn: int
    """The token that ends an assistant turn (``<|im_end|>`` in ChatML)."""

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        """The prompt the model sees for a chat request: the chat template with its generation prompt."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of response ids, special tokens left out."""
        ...


@dataclass
class Policy:
    """A model behind a relight gateway that serves on a thread of its own, with an in-memory store."""

    gateway: Gateway
    store: InMemoryStore
    model: str
    reference: Reference
    retokenized: bool = False
    """True when the upstream gives no token ids: spans are then marked retokenized and carry no logprobs."""
    clients: list[openai.OpenAI] = field(default_factory=list[openai.OpenAI])

    def attempt(self) -> AttemptRef:
        """A fresh rollout attempt for one test's calls."""

        async def claimed() -> AttemptRef:
            await self.store.enqueue([RolloutRequest(input="compat")])
            found = await self.store.claim("compat")
            assert found is not None
            return AttemptRef(found[0].rollout_id, found[1].attempt_id)

        return self.gateway.call(claimed())

    def base_url(self, attempt: AttemptRef) -> str:
        return self.gateway.base_url_for(attempt.rollout_id, attempt.attempt_id)

    def client(self, attempt: AttemptRef) -> openai.OpenAI:
        """A client for the attempt, closed when the policy stops being served."""
        client = openai.OpenAI(base_url=self.base_url(attempt), api_key="unused", max_retries=0)
        self.clients.append(client)
        return client

    def spans(self, attempt: AttemptRef) -> list[Span]:
        """The attempt's LLM spans, once every call answered so far is recorded."""

        async def recorded() -> list[Span]:
            await self.gateway.flush()
            return await self.store.query_spans(attempt.rollout_id, attempt.attempt_id)

        return [span for span in self.gateway.call(recorded()) if span.kind is SpanKind.LLM]

    def only_span(self, attempt: AttemptRef) -> Span:
        (span,) = self.spans(attempt)
        return span


@contextmanager
def serve_policy(
    upstreams: Sequence[UpstreamTarget | Upstream],
    *,
    reference: Reference,
    model: str,
    retokenized: bool = False,
    **gateway_options: Any,
) -> Generator[Policy]:
    """A gateway in front of ``upstreams`` on a thread of its own, for the kit's tests."""
    store = InMemoryStore()
    with Gateway(store, upstreams, **gateway_options) as gateway:
        policy = Policy(gateway, store, model, reference, retokenized)
        try:
            yield policy
        finally:
            for client in policy.clients:
                client.close()


def check_span(
    policy: Policy,
    span: Span,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: str | None = None,
) -> None:
    """Hold an LLM span to what makes it trainable (see the module docstring); ``text`` is what the client got."""
    check_llm_span(policy.reference, span, messages=messages, tools=tools, text=text, retokenized=policy.retokenized)


def check_recorded_span(reference: Reference, span: Span, *, retokenized: bool = False) -> None:
    """:func:`check_llm_span` against the messages and tools the span recorded (what a framework sent)."""
    messages = json.loads(cast(str, span.attributes[semconv.GEN_AI_INPUT_MESSAGES]))
    tools_text = span.attributes.get(semconv.GEN_AI_TOOL_DEFINITIONS)
    tools = json.loads(tools_text) if isinstance(tools_text, str) else None
    check_llm_span(reference, span, messages=messages, tools=tools, retokenized=retokenized)


def check_llm_span(
    reference: Reference,
    span: Span,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: str | None = None,
    retokenized: bool = False,
) -> None:
    """:func:`check_span` given the model's reference and whether its upstream gives token ids."""
    attributes = span.attributes
    assert span.status_code == "OK", span.status_message
    prompt = cast(list[int], attributes[semconv.PROMPT_TOKEN_IDS])
    response = cast(list[int], attributes[semconv.RESPONSE_TOKEN_IDS])
    assert prompt == reference.prompt_ids(messages, tools)
    if text is not None:
        assert reference.decode(response).startswith(text)
    logprobs = attributes.get(semconv.RESPONSE_LOGPROBS)
    assert attributes[semconv.RETOKENIZED] is retokenized
    if retokenized:
        assert logprobs is None
    else:
        assert isinstance(logprobs, list)
        assert len(cast(list[float], logprobs)) == len(response)
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == len(prompt)
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == len(response)
    finish = cast(list[str], attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS])
    if finish[0] in ("stop", "tool_calls") and not attributes.get(semconv.GEN_AI_REQUEST_STOP_SEQUENCES):
        assert response[-1] == reference.end_of_turn


def _forced_call(policy: Policy, client: openai.OpenAI, tool_choice: Any) -> Choice:
    reply = client.chat.completions.create(
        model=policy.model,
        messages=cast(Any, QUESTION),
        tools=cast(Any, [ADD_TOOL]),
        tool_choice=tool_choice,
        max_completion_tokens=40,
        temperature=0,
    )
    return reply.choices[0]


class ClientCompatibility:
    """The raw ``openai`` client, feature by feature. Subclasses provide the ``policy`` fixture."""

    def test_chat(self, policy: Policy) -> None:
        attempt = policy.attempt()
        reply = policy.client(attempt).chat.completions.create(
            model=policy.model, messages=cast(Any, QUESTION), max_completion_tokens=SHORT, temperature=0
        )
        text = reply.choices[0].message.content or ""
        assert text
        assert reply.usage is not None
        span = policy.only_span(attempt)
        check_span(policy, span, messages=QUESTION, text=text)
        assert span.attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == SHORT
        assert reply.usage.completion_tokens == span.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]

    @pytest.mark.parametrize("include_usage", [False, True])
    def test_stream(self, policy: Policy, include_usage: bool) -> None:
        attempt = policy.attempt()
        stream = policy.client(attempt).chat.completions.create(
            model=policy.model,
            messages=cast(Any, QUESTION),
            max_completion_tokens=SHORT,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True} if include_usage else openai.omit,
        )
        chunks = list(stream)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
        assert len(usages) == (1 if include_usage else 0)
        check_span(policy, policy.only_span(attempt), messages=QUESTION, text=text)

    @pytest.mark.parametrize("tool_choice", ["auto", "none"])
    def test_tools_the_model_may_call(self, policy: Policy, tool_choice: str) -> None:
        attempt = policy.attempt()
        choice = _forced_call(policy, policy.client(attempt), tool_choice)
        if tool_choice == "none":
            assert not choice.message.tool_calls
        check_span(policy, policy.only_span(attempt), messages=QUESTION, tools=[ADD_TOOL])

    @pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
    def test_tools_the_model_must_call(self, policy: Policy, tool_choice: Any) -> None:
        attempt = policy.attempt()
        choice = _forced_call(policy, policy.client(attempt), tool_choice)
        (call,) = choice.message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        assert choice.finish_reason == "tool_calls"
        assert call.function.name == "add"
        assert set(json.loads(call.function.arguments)) == {"a", "b"}
        check_span(policy, policy.only_span(attempt), messages=QUESTION, tools=[ADD_TOOL])

    def test_tool_round_trip_with_null_content(self, policy: Policy) -> None:
        attempt = policy.attempt()
        client = policy.client(attempt)
        choice = _forced_call(policy, client, "required")
        (call,) = choice.message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        history: list[Json] = [
            *QUESTION,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "5"},
        ]
        reply = client.chat.completions.create(
            model=policy.model,
            messages=cast(Any, history),
            tools=cast(Any, [ADD_TOOL]),
            max_completion_tokens=SHORT,
            temperature=0,
        )
        _, second = policy.spans(attempt)
        check_span(policy, second, messages=history, tools=[ADD_TOOL], text=reply.choices[0].message.content or "")

    def test_logprobs_with_top_logprobs(self, policy: Policy) -> None:
        attempt = policy.attempt()
        reply = policy.client(attempt).chat.completions.create(
            model=policy.model,
            messages=cast(Any, QUESTION),
            max_completion_tokens=SHORT,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
        )
        content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
        assert content
        for token in content:
            assert len(token.top_logprobs) == 3
            assert token.bytes is not None
            assert token.top_logprobs[0].logprob >= token.top_logprobs[-1].logprob
        assert "".join(token.token for token in content).startswith(reply.choices[0].message.content or "")
        span = policy.only_span(attempt)
        check_span(policy, span, messages=QUESTION)
        if not policy.retokenized:
            assert [token.logprob for token in content] == span.attributes[semconv.RESPONSE_LOGPROBS]

    def test_stop_seed_and_max_completion_tokens(self, policy: Policy) -> None:
        attempt = policy.attempt()
        client = policy.client(attempt)

        def ask(stop: list[str] | None = None) -> ChatCompletion:
            return client.chat.completions.create(
                model=policy.model,
                messages=cast(Any, QUESTION),
                max_completion_tokens=6,
                seed=11,
                stop=stop if stop is not None else openai.omit,
            )

        first, again = ask(), ask()
        assert first.choices[0].message.content == again.choices[0].message.content
        assert first.usage is not None
        assert first.usage.completion_tokens <= 6
        stopped = ask(stop=[" "])
        assert " " not in (stopped.choices[0].message.content or "")
        spans = policy.spans(attempt)
        assert len(spans) == 3
        for span, reply in zip(spans, (first, again, stopped), strict=True):
            check_span(policy, span, messages=QUESTION, text=reply.choices[0].message.content or "")
            assert span.attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 6
        assert spans[2].attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == [" "]

    @pytest.mark.parametrize(
        "response_format",
        [
            {"type": "json_object"},
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "answer",
                    "schema": {
                        "type": "object",
                        "properties": {"sum": {"type": "integer"}},
                        "required": ["sum"],
                        "additionalProperties": False,
                    },
                },
            },
        ],
    )
    def test_response_format(self, policy: Policy, response_format: Json) -> None:
        attempt = policy.attempt()
        try:
            reply = policy.client(attempt).chat.completions.create(
                model=policy.model,
                messages=cast(Any, QUESTION),
                response_format=cast(Any, response_format),
                max_completion_tokens=40,
                temperature=0,
            )
        except openai.BadRequestError as error:  # an engine that cannot must say so, naming the option
            refusal, reply = str(error), None
        else:
            refusal = None
        if reply is None:
            assert refusal is not None
            assert "response_format" in refusal
            return
        answer = json.loads(reply.choices[0].message.content or "")
        assert isinstance(answer, dict)
        if response_format["type"] == "json_schema":
            assert set(cast(Json, answer)) == {"sum"}
        check_span(policy, policy.only_span(attempt), messages=QUESTION)

    def test_legacy_completions_with_logprobs(self, policy: Policy) -> None:
        attempt = policy.attempt()
        reply = policy.client(attempt).completions.create(
            model=policy.model, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2
        )
        logprobs = reply.choices[0].logprobs
        assert logprobs is not None
        assert logprobs.tokens
        assert "".join(logprobs.tokens) == reply.choices[0].text
        assert all(len(top) == 2 for top in logprobs.top_logprobs or [])
        span = policy.only_span(attempt)
        attributes = span.attributes
        assert span.status_code == "OK"
        prompt = cast(list[int], attributes[semconv.PROMPT_TOKEN_IDS])
        response = cast(list[int], attributes[semconv.RESPONSE_TOKEN_IDS])
        assert policy.reference.decode(prompt) == "The capital of France is"
        assert policy.reference.decode(response) == reply.choices[0].text
        assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == len(prompt)
        assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == len(response)
        assert attributes[semconv.RETOKENIZED] is policy.retokenized
        if not policy.retokenized:
            assert attributes[semconv.RESPONSE_LOGPROBS] == logprobs.token_logprobs

    def test_unknown_model_is_404(self, policy: Policy) -> None:
        attempt = policy.attempt()
        with pytest.raises(openai.NotFoundError, match="no-such-model"):
            policy.client(attempt).chat.completions.create(
                model="no-such-model", messages=cast(Any, QUESTION), max_completion_tokens=2
            )

    def test_responses(self, policy: Policy) -> None:
        attempt = policy.attempt()
        client = policy.client(attempt)
        whole = client.responses.create(model=policy.model, input="What is 2 + 3?", max_output_tokens=SHORT)
        events = list(
            client.responses.create(model=policy.model, input="What is 2 + 3?", max_output_tokens=SHORT, stream=True)
        )
        ends = [event for event in events if event.type in ("response.completed", "response.incomplete")]
        assert len(ends) == 1  # incomplete where max_output_tokens cut the answer
        streamed_text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
        history: list[Json] = [
            {"role": "user", "content": "What is 2 + 3?"},
            {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "5"},
        ]
        tool = {"type": "function", "name": "add", "parameters": ADD_TOOL["function"]["parameters"]}
        after = client.responses.create(
            model=policy.model, input=cast(Any, history), tools=cast(Any, [tool]), max_output_tokens=SHORT
        )
        assert whole.output_text
        assert after.status in ("completed", "incomplete")
        spans = policy.spans(attempt)
        assert len(spans) == 3
        asked = [{"role": "user", "content": "What is 2 + 3?"}]
        check_span(policy, spans[0], messages=asked, text=whole.output_text)
        check_span(policy, spans[1], messages=asked, text=streamed_text)
        call_turn: Json = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
            ],
        }
        chat_history = [history[0], call_turn, {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
        chat_tools = [{"type": "function", "function": {"name": "add", "parameters": tool["parameters"]}}]
        check_span(policy, spans[2], messages=chat_history, tools=chat_tools, text=after.output_text)

    def test_anthropic_tool_round_trip(self, policy: Policy) -> None:
        """The ``anthropic`` client through ``/v1/messages``: a forced ``tool_use``, then its ``tool_result``
        with the answer streamed."""
        attempt = policy.attempt()
        tool: Json = {
            "name": "add",
            "description": "Add two integers.",
            "input_schema": ADD_TOOL["function"]["parameters"],
        }
        base_url = policy.base_url(attempt).removesuffix("/v1")
        with anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0) as client:
            first = client.messages.create(
                model=policy.model,
                max_tokens=40,
                messages=cast(Any, QUESTION),
                tools=cast(Any, [tool]),
                tool_choice={"type": "tool", "name": "add"},
                extra_body=GREEDY,
            )
            assert first.stop_reason == "tool_use"
            (use,) = [block for block in first.content if isinstance(block, anthropic.types.ToolUseBlock)]
            assert use.name == "add"
            assert set(cast(Json, use.input)) == {"a", "b"}
            history: list[Json] = [
                *QUESTION,
                {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]},
            ]
            with client.messages.stream(
                model=policy.model,
                max_tokens=SHORT,
                messages=cast(Any, history),
                tools=cast(Any, [tool]),
                extra_body=GREEDY,
            ) as stream:
                answer = "".join(stream.text_stream)
                final = stream.get_final_message()
        assert final.stop_reason in ("end_turn", "max_tokens")
        assert answer
        spans = policy.spans(attempt)
        assert len(spans) == 2
        for span in spans:
            check_recorded_span(policy.reference, span, retokenized=policy.retokenized)
        answered = cast(list[int], spans[1].attributes[semconv.RESPONSE_TOKEN_IDS])
        assert policy.reference.decode(answered).startswith(answer)
        sent = json.loads(cast(str, spans[1].attributes[semconv.GEN_AI_INPUT_MESSAGES]))
        assert [message["role"] for message in sent] == ["user", "assistant", "tool"]
        assert [call["id"] for call in sent[1]["tool_calls"]] == [use.id] == [sent[2]["tool_call_id"]]
