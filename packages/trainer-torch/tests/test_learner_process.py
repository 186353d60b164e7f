"""Live updates with the learner in a process of its own (``GRPO(live_updates=True, learner_process=True)``)."""

from pathlib import Path
from typing import Any

import pytest
import torch

from relight_testing.torch_updates import answers
from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.objectives import negative_log_likelihood
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Sample
from relight_torch.learner.process import LearnerProcessError
from relight_torch.models.tiny import tiny_engine


def weights(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}


def test_the_learner_process_steps_the_shared_weights_and_the_engine_serves_them(engine: TorchEngine) -> None:
    algorithm = GRPO(engine, lr=1e-2, live_updates=True, learner_process=True)
    before = weights(engine)
    metrics = algorithm.learn(answers(engine, ["84", "19"], [1.0, 0.0]))
    assert metrics["grad_norm"] > 0
    # The parent has no optimizer: the weights it sees moved because the child stepped them in shared memory.
    assert engine.policy_version == 1
    moved = False
    trained = algorithm.learner.model.parameters()
    for (name, served), mine in zip(engine.model.named_parameters(), trained, strict=True):
        assert torch.equal(served, mine), name
        assert served.data_ptr() != mine.data_ptr(), name
        moved = moved or not torch.equal(served, before[name])
    assert moved


def test_a_checkpoint_round_trip_with_a_learner_process_resumes_the_same_step(tmp_path: Path) -> None:
    options: Any = {"lr": 1e-3, "mini_batches": 2, "live_updates": True, "learner_process": True}
    with tiny_engine(seed=0) as engine:
        algorithm = GRPO(engine, **options)
        algorithm.learn(answers(engine, ["84", "19", "8"], [1.0, 0.0, 0.5]))
        algorithm.save(tmp_path / "step-1")  # the optimizer's state comes back from the child
        algorithm.learn(answers(engine, ["84", "7", "19"], [0.0, 1.0, 0.3]))
        expected = weights(engine)

    with tiny_engine(seed=5) as engine:
        resumed = GRPO(engine, **options)
        resumed.load(tmp_path / "step-1")  # weights into shared memory, the optimizer's state into the child
        resumed.learn(answers(engine, ["84", "7", "19"], [0.0, 1.0, 0.3]))
        assert resumed.policy_version == 2
        for name, tensor in weights(engine).items():
            assert torch.equal(tensor, expected[name]), name


def test_a_failure_in_the_learner_process_is_raised_with_its_reason(engine: TorchEngine) -> None:
    algorithm = GRPO(engine, live_updates=True, learner_process=True)
    empty = Sample(prompt_ids=[1, 2], response_ids=[])
    with pytest.raises(LearnerProcessError, match="needs at least one response token"):
        algorithm.learner.update([empty], negative_log_likelihood)
    assert algorithm.learner.logprobs([Sample([1, 2], [3])])[0]  # the process lives on after a failed call
