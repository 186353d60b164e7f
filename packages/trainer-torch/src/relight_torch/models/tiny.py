"""A tiny Llama and its tokenizer, built on the spot: a real model for tests and the demo, no downloads.

The tokenizer is a byte-level BPE trained at start-up from ``corpus.txt`` (kept in this package),
with digits split one by one so that numbers are copied token for token, and a chat template
that renders tools and hermes-style ``<tool_call>`` blocks (see :mod:`relight_torch.engine.tool_calls`).
Both are deterministic: the same corpus and vocabulary size give the same tokenizer, and the
same seed gives the same weights.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from relight_torch.engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from relight_torch.engine.torch_engine import TorchEngine

__all__ = ["CHAT_TEMPLATE", "corpus_text", "tiny_engine", "tiny_model", "tiny_tokenizer"]

PAD, END = "<|pad|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|tools|>")

CHAT_TEMPLATE = (
    "{%- if tools -%}<|tools|>"
    "{%- for tool in tools -%}{%- set f = tool.function if tool.function is defined else tool -%}"
    "{{ f.name }}({{ (f.parameters.properties if f.parameters is defined and f.parameters.properties is defined"
    " else {}) | join(', ') }})"
    "{%- if f.description %}: {{ f.description }}{% endif %}{{ '\\n' }}"
    "{%- endfor -%}<|end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' -%}<|assistant|>{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] -%}{%- set fn = call.function if call.function is defined else call -%}"
    '<tool_call>{"name": {{ fn.name | tojson }}, "arguments": {{ fn.arguments | tojson }}}</tool_call>'
    "{%- endfor -%}<|end|>"
    "{%- else -%}<|{{ message.role }}|>{{ message.content }}<|end|>{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)
"""Tools as ``name(param, …): description`` lines, then one ``<|role|>…<|end|>`` block per message.

Tool-call arguments are rendered with ``tojson`` from a dict, as Hugging Face templates expect;
the engine turns OpenAI's JSON-string arguments into dicts before rendering.
"""


def corpus_text() -> str:
    """The small in-repo corpus the tiny tokenizer learns its merges from."""
    return files("relight_torch.models").joinpath("corpus.txt").read_text(encoding="utf-8")


def tiny_tokenizer(vocab_size: int = 400, corpus: str | None = None) -> PreTrainedTokenizerFast:
    """A byte-level BPE with ``vocab_size`` entries (special tokens included) and the chat template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 2,  # the two tool-call markers are added after training
        special_tokens=[PAD, END, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = corpus if corpus is not None else corpus_text()
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    tokenizer.add_tokens([TOOL_CALL_OPEN, TOOL_CALL_CLOSE])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token=PAD, eos_token=END, chat_template=CHAT_TEMPLATE, padding_side="left"
    )


def tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 8,
    max_positions: int = 4096,
    init_std: float = 0.06,
) -> LlamaForCausalLM:
    """A Llama with random weights drawn from ``seed``, sized for the CPU (0.5M parameters by default).

    ``max_positions`` is the context (prompt and response) the engine allows: 4,096 tokens hold a
    realistic agent's prompt (a schema, a few turns). Rotary positions have no weights, so it
    changes nothing else.

    ``init_std`` is three times transformers' default: at this width, the default's near-uniform
    attention takes several times longer to learn to copy (the skill the calculator task needs).
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 11 // 4,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        initializer_range=init_std,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def tiny_engine(
    *,
    seed: int = 0,
    name: str = "relight-tiny",
    default_max_tokens: int | None = 512,
    force_first_tool_call: bool = False,
    **model_options: Any,
) -> TorchEngine:
    """An engine serving a fresh tiny model (weights and sampling seeded by ``seed``).

    A request without ``max_tokens`` gets at most ``default_max_tokens`` new tokens: an untrained
    model rarely ends by itself, and the rest of a 4,096-token context is a long wait on a CPU.
    ``force_first_tool_call`` decodes a request that offers tools as if it required one until a tool
    has answered, as ``python -m relight_torch.server --force-first-tool-call`` does (see
    :class:`~relight_torch.engine.torch_engine.TorchEngine`): an untrained model never picks a tool by itself.
    """
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=seed, **model_options)
    return TorchEngine(
        model,
        tokenizer,
        name=name,
        seed=seed,
        default_max_tokens=default_max_tokens,
        force_first_tool_call=force_first_tool_call,
    )
