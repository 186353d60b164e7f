from collections.abc import Iterator

import pytest

from relight_testing.models import smollm2_path  # noqa: F401  # the real model, for the tests that ask for it
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_engine


@pytest.fixture
def engine() -> Iterator[TorchEngine]:
    """A fresh tiny model (random weights, seed 0) served by an engine that is closed afterwards."""
    with tiny_engine(seed=0) as served:
        yield served
