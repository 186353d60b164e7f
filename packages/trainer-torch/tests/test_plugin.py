from collections.abc import Iterator
from pathlib import Path

import pytest

from relight.plugins import registry, reset_plugins
from relight_torch.grpo import GRPO
from relight_torch.sft import SFT


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RELIGHT_PLUGINS", "torch")
    reset_plugins()
    yield
    reset_plugins()


def test_the_entry_point_registers_the_engine_and_algorithms() -> None:
    assert {"grpo", "reinforce++", "sft"} <= set(registry("algorithms").names())
    assert "torch" in registry("engines").names()


def test_factories_build_on_the_tiny_model_or_a_local_directory(tmp_path: Path) -> None:
    grpo = registry("algorithms").get("reinforce++")("tiny", lr=1e-3)
    assert isinstance(grpo, GRPO)
    assert grpo.estimator == "reinforce++"
    grpo.save(tmp_path)
    sft = registry("algorithms").get("sft")(tmp_path)
    assert isinstance(sft, SFT)
    assert sft.model == grpo.model  # a saved policy keeps its name, whatever its folder is called
    for algorithm in (grpo, sft):
        algorithm.engine.close()
