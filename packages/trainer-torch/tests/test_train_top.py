"""Training only the top decoder layers (the CPU recipes' speed lever): the rest stays exactly as it was."""

import pytest
import torch

from relight_testing.torch_updates import answers
from relight_torch.learner.learner import Sample
from relight_torch.models.tiny import tiny_engine
from relight_torch.recipes.warm_start_grpo import Recipe, train_top


def test_only_the_top_layers_and_the_final_norm_move_and_the_update_still_learns() -> None:
    with tiny_engine(seed=0, num_layers=3) as engine:
        transitions = answers(engine, ["84", "19", "84.", "42"], [1.0, 0.0, 1.0, 0.0])
        train_top(engine.model, 1)
        before = {name: p.detach().clone() for name, p in engine.model.named_parameters()}
        algorithm = Recipe(trained_layers=1, lr=1e-3).grpo(engine)
        assert not algorithm.learner.recompute_activations
        samples = [Sample(t.prompt_token_ids, t.response_token_ids) for t in transitions]
        old = [sum(row) for row in algorithm.learner.logprobs(samples)]
        metrics = algorithm.learn(transitions)
        new = [sum(row) for row in algorithm.learner.logprobs(samples)]
        moved = {name for name, p in engine.model.named_parameters() if not torch.equal(p, before[name])}
    assert metrics["first_ratio"] == pytest.approx(1.0, abs=1e-5)
    assert moved
    assert all(name.startswith(("model.layers.2.", "model.norm.")) for name in moved), moved
    assert [b > a for a, b in zip(old, new, strict=True)] == [True, False, True, False]


def test_more_layers_than_the_model_has_is_refused_by_name() -> None:
    with tiny_engine(seed=0, num_layers=2) as engine, pytest.raises(ValueError, match="trained_layers"):
        train_top(engine.model, 3)
