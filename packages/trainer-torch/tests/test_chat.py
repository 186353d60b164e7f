import json

import pytest

from relight_torch.demo.calculator import TOOLS, Problem, demonstration
from relight_torch.engine.chat import assistant_turns
from relight_torch.engine.tool_calls import parse_tool_calls
from relight_torch.models.tiny import tiny_tokenizer


def test_hermes_blocks_become_openai_tool_calls() -> None:
    text, calls = parse_tool_calls(
        'Let me check.<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>'
    )
    assert text == "Let me check."
    (call,) = calls
    assert call["type"] == "function"
    assert call["function"] == {"name": "calculator", "arguments": json.dumps({"expression": "2 + 2"})}
    assert str(call["id"]).startswith("call_")


@pytest.mark.parametrize(
    "text",
    ["<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>', "no call here", "<tool_call>"],
)
def test_text_that_is_not_a_well_formed_call_stays_text(text: str) -> None:
    assert parse_tool_calls(text) == (text, [])


def test_an_assistant_turn_is_exactly_the_tokens_the_model_must_produce() -> None:
    tokenizer = tiny_tokenizer()
    (call, answer) = assistant_turns(tokenizer, demonstration(Problem(12, "*", 7), use_tool=True), tools=TOOLS)
    assert tokenizer.decode(call[1]) == (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 7"}}</tool_call><|end|>'
    )
    assert tokenizer.decode(answer[1]) == "84<|end|>"
    assert tokenizer.decode(answer[0]).endswith("<|tool|>84<|end|><|assistant|>")
    # What the model said is rendered back the way it was sampled, so parsing and templating round-trip.
    _, parsed = parse_tool_calls(tokenizer.decode(call[1], skip_special_tokens=True))
    assert json.loads(str(parsed[0]["function"]["arguments"])) == {"expression": "12 * 7"}  # type: ignore[index]


def test_a_template_that_rewrites_history_is_refused() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m.content if loop.last else '' }}{% endfor %}"
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        assistant_turns(tokenizer, messages)
