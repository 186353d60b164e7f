import asyncio
import re
from pathlib import Path

import pytest

from relight.engine import GenerationRequest, SamplingParams
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models import SMOLLM2_HUB_ID, ModelUnavailable, smollm2


def test_smollm2_is_a_real_chat_model_that_answers(smollm2_path: Path) -> None:
    assert smollm2() == smollm2_path  # built once, then the cache
    with TorchEngine.from_pretrained(smollm2_path) as engine:
        assert len(engine.tokenizer) == 49152
        assert engine.tokenizer.eos_token == "<|im_end|>"  # what ends a ChatML turn, as on the hub
        assert engine.name == SMOLLM2_HUB_ID  # the name its config gives, not the cache folder's
        request = GenerationRequest(
            model=engine.name,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            sampling=SamplingParams(temperature=0, max_tokens=40),
        )
        prompt = engine.tokenizer.decode(engine.prompt_ids(request))
        generation = asyncio.run(engine.generate(request))
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "Paris" in generation.text
    assert generation.finish_reason == "stop"
    assert generation.response_token_ids[-1] == engine.tokenizer.eos_token_id
    assert len(generation.response_logprobs) == len(generation.response_token_ids)


def test_a_local_folder_is_taken_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert smollm2(tmp_path) == tmp_path
    (tmp_path / "config.json").unlink()
    with pytest.raises(ModelUnavailable, match=r"no config\.json"):
        smollm2(tmp_path)


def test_a_source_that_is_neither_a_folder_nor_the_hub_id_is_refused() -> None:
    with pytest.raises(ModelUnavailable, match=re.escape(f"neither a local folder nor {SMOLLM2_HUB_ID!r}")):
        smollm2("someone/else")
