"""Each scenario's GPU recipe is a valid relight-verl config with the paper's model size."""

from __future__ import annotations

import pytest

from relight_testing.examples import example_file, load_example

relight_verl = pytest.importorskip("relight_verl")

MODELS = {
    "sql_agent": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    "calc_agent": "Qwen/Qwen2.5-1.5B-Instruct",
    "rag_agent": "meta-llama/Llama-3.2-3B-Instruct",
    "math_crew": "Qwen/Qwen2.5-1.5B-Instruct",
    "coding_agent": "Qwen/Qwen2.5-Coder-7B-Instruct",
}


@pytest.mark.parametrize(("scenario", "model"), MODELS.items())
def test_the_recipe_loads_as_a_verl_config_for_the_papers_model(scenario: str, model: str) -> None:
    gpu_train = load_example(example_file("gpu/train.py", near=__file__))
    assert set(gpu_train.SCENARIOS) == set(MODELS)
    config = relight_verl.VerlConfig.from_file(gpu_train.config_path(scenario))
    assert config.model == model
    assert config.hydra_overrides(), "it maps onto verl's own Hydra config"
