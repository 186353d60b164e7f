from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from relight.engine import SamplingParams
from relight.records import Transition
from relight_torch.algorithms.grpo import GRPO
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine


def batch(engine: TorchEngine, seed: int) -> list[Transition]:
    """Transitions sampled by the engine itself (so the test also covers its RNG), scored at random."""
    generator = torch.Generator().manual_seed(seed)
    prompt = engine.tokenizer.encode("What is 12 * 7?")
    transitions = []
    for i in range(6):
        sampled = engine.submit(prompt, SamplingParams(max_tokens=6)).result()
        transitions.append(
            Transition(
                rollout_id=f"ro-{i}",
                attempt_id="at",
                group_id=f"g{i % 2}",
                step=0,
                prompt_token_ids=prompt,
                response_token_ids=sampled.response_ids,
                response_logprobs=sampled.logprobs,
                reward=float(torch.rand(1, generator=generator)),
            )
        )
    return transitions


def weights(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}


def test_resuming_takes_exactly_the_step_the_interrupted_run_would_have_taken(tmp_path: Path) -> None:
    with tiny_engine(seed=0) as engine:
        algorithm = GRPO(engine, lr=1e-3, mini_batches=2)
        algorithm.learn(batch(engine, seed=1))
        algorithm.save(tmp_path / "step-1")
        algorithm.learn(batch(engine, seed=2))  # samples with the engine's RNG, shuffles, steps Adam
        expected = weights(engine)
        version = algorithm.policy_version

    with tiny_engine(seed=5) as engine:  # other random weights: everything must come from the checkpoint
        resumed = GRPO(engine, lr=1e-3, mini_batches=2)
        resumed.load(tmp_path / "step-1")
        assert resumed.policy_version == 1
        resumed.learn(batch(engine, seed=2))
        assert resumed.policy_version == version
        for name, tensor in weights(engine).items():
            assert torch.equal(tensor, expected[name]), name


def test_a_checkpoint_is_a_hugging_face_model_directory(tmp_path: Path) -> None:
    with tiny_engine(seed=0) as engine:
        GRPO(engine).save(tmp_path)
        ids = torch.tensor([engine.tokenizer.encode("What is 2 + 2?")])
        with torch.no_grad():
            logits = engine.model(input_ids=ids).logits
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, logits, atol=1e-6)
    assert (tmp_path / "model.safetensors").exists()
    with TorchEngine.from_pretrained(tmp_path) as served:  # tokenizer and chat template came along
        assert served.tokenizer.chat_template == engine.tokenizer.chat_template
        assert served.name == engine.name == "relight-tiny"  # the name it was trained under, not the folder's


def test_loading_weights_that_do_not_fit_names_what_is_wrong(tmp_path: Path) -> None:
    with tiny_engine(seed=0, num_layers=1) as small:
        GRPO(small).save(tmp_path)
    with tiny_engine(seed=0) as engine, pytest.raises(ValueError, match="missing"):
        GRPO(engine).load(tmp_path)
