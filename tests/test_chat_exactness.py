"""relight's one renderer and its exactness check, with real Hugging Face tokenizers.

A call is exact only when its ids hold its text, tool calls, tool results and tools: a template
that drops any of them is caught, naming what it dropped; tools in whichever shape a tracer wrote
them render one prompt; a template without tool support (SmolLM2's) gets them the hermes way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from relight.chat import Inexact, assistant_turn, normal_tools, render, retokenize
from relight_testing import models as testing_models
from relight_torch.models.tiny import tiny_tokenizer

smollm2_path = testing_models.smollm2_path

TOOL = {
    "name": "search",
    "description": "Look up the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"city": "Paris"}'}}
HISTORY = [
    {"role": "system", "content": "You answer questions about the weather."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
CALLING = {"role": "assistant", "content": None, "tool_calls": [CALL]}
ANSWERED = [*HISTORY, CALLING, {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]


def reasons(result: Any) -> list[str]:
    return result.reasons


def test_tools_in_every_tracer_shape_render_one_prompt() -> None:
    tokenizer = tiny_tokenizer()
    shapes = [
        [{"type": "function", "function": TOOL}],  # OpenAI's request shape (OpenInference keeps it)
        [{"type": "function", **TOOL}],  # the GenAI conventions' flat shape (OpenLLMetry, openai-v2's utilities)
        [TOOL],  # a bare function
        [{"type": "function", "function": {**TOOL, "strict": True}}],  # a flag the model never sees
        [{"type": "function", "function": {**TOOL, "parameters": json.dumps(TOOL["parameters"])}}],
    ]
    assert all(normal_tools(shape) == shapes[0] for shape in shapes)
    prompts = {tuple(render(tokenizer, HISTORY, tools=shape, add_generation_prompt=True)) for shape in shapes}
    assert len(prompts) == 1


def test_a_template_without_tools_gets_them_written_and_the_call_is_exact(smollm2_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    tools = [{"type": "function", "function": TOOL}]
    result = retokenize(tokenizer, HISTORY, CALLING, tools)
    assert result.exact, result.mismatch
    assert (result.prompt_ids, result.response_ids) == assistant_turn(tokenizer, HISTORY, CALLING, tools=tools)
    assert json.dumps(tools[0]) in tokenizer.decode(result.prompt_ids)
    assert tokenizer.decode(result.response_ids) == (
        '<tool_call>{"name": "search", "arguments": {"city": "Paris"}}</tool_call><|im_end|>\n'
    )
    answer = {"role": "assistant", "content": "It is 18 C and sunny."}
    assert retokenize(tokenizer, ANSWERED, answer, tools).exact


def test_a_template_that_drops_tool_calls_and_tools_is_inexact_naming_them() -> None:
    tokenizer = tiny_tokenizer()
    # It takes tools and tool calls (so the renderer hands them over) and renders neither.
    tokenizer.chat_template = (
        "{#- tools, tool_calls: taken, never shown -#}"
        "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endfor -%}"
        "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
    )
    tools = [{"type": "function", "function": TOOL}]
    calling = retokenize(tokenizer, HISTORY, CALLING, tools)
    assert tokenizer.decode(calling.response_ids) == "<|end|>"  # the turn holds nothing of the call
    assert reasons(calling) == [Inexact.TOOL_CALLS_NOT_RENDERED, Inexact.TOOLS_NOT_RENDERED]
    assert "the answer's call of 'search'" in str(calling.mismatch)
    answered = retokenize(tokenizer, ANSWERED, {"role": "assistant", "content": "Sunny."}, tools)
    assert reasons(answered) == [Inexact.TOOL_CALLS_NOT_RENDERED, Inexact.TOOLS_NOT_RENDERED]
    assert "message 2's call of 'search'" in str(answered.mismatch)


def test_tool_calls_without_tool_definitions_are_tools_missing() -> None:
    tokenizer = tiny_tokenizer()
    result = retokenize(tokenizer, HISTORY, CALLING, [])
    assert reasons(result) == [Inexact.TOOLS_MISSING]
    assert retokenize(tokenizer, HISTORY, {"role": "assistant", "content": "Sunny."}, []).exact


def test_an_answer_cut_at_its_token_limit_is_inexact() -> None:
    tokenizer = tiny_tokenizer()
    answer = {"role": "assistant", "content": "It is"}
    assert reasons(retokenize(tokenizer, HISTORY, answer, [], truncated=True)) == [Inexact.TRUNCATED]


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{%- for m in messages -%}{{ m.content | trim }}|{%- endfor -%}", Inexact.TEXT_NOT_RENDERED),
        (
            "{%- for m in messages -%}{{ m.content if m.role != 'tool' else '' }}|{%- endfor -%}",
            Inexact.TOOL_RESULTS_NOT_RENDERED,
        ),
    ],
)
def test_a_template_that_drops_text_is_inexact(template: str, reason: Inexact) -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = template
    history = [{"role": "user", "content": "  padded  "}, {"role": "tool", "content": "18 C"}]
    assert reason in reasons(retokenize(tokenizer, history, {"role": "assistant", "content": "ok"}, []))
