from pathlib import Path

from relight_torch import factories
from relight_torch.grpo import GRPO
from relight_torch.sft import SFT


def test_factories_build_on_the_tiny_model_or_a_local_directory(tmp_path: Path) -> None:
    grpo = factories.reinforce_pp("tiny", lr=1e-3)
    assert isinstance(grpo, GRPO)
    assert grpo.estimator == "reinforce++"
    grpo.save(tmp_path)
    sft = factories.sft(tmp_path)
    assert isinstance(sft, SFT)
    assert sft.model == grpo.model  # a saved policy keeps its name, whatever its folder is called
    for algorithm in (grpo, sft):
        algorithm.engine.close()
