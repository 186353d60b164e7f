"""Fixtures for relight-verl's tests: a tiny Hugging Face model directory built in place, no download."""

from __future__ import annotations

from pathlib import Path

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is 2 + 3? The answer is 5.",
    "def add(a, b):\n    return a + b",
    "You are a helpful assistant. Answer with a number.",
]


def build_tiny_model(directory: Path, *, weights: bool = False) -> Path:
    """A Qwen2-architecture model small enough for any machine: byte-level BPE tokenizer, one layer.

    Without ``weights`` only the config and tokenizer are written: all that verl's config classes read.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        architectures=["Qwen2ForCausalLM"],
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    config.save_pretrained(directory)
    if weights:
        from transformers import Qwen2ForCausalLM

        Qwen2ForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture
def tiny_model_with_weights(tmp_path: Path) -> Path:
    """The tiny model with random weights, for the GPU tests that serve and train it."""
    return build_tiny_model(tmp_path / "tiny-qwen2", weights=True)
