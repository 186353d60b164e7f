"""The compatibility kit against the real SmolLM2-135M-Instruct, served by relight-torch in-process."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from relight.testing.compat import ClientCompatibility, Policy, serve_policy
from relight_torch.engine import TorchEngine
from relight_torch.testing import TokenizerReference

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_path: Path) -> Iterator[TorchEngine]:
    with TorchEngine.from_pretrained(smollm2_path, name="smollm2") as engine:
        yield engine


class TestInProcess(ClientCompatibility):
    @pytest.fixture(scope="class")
    @classmethod
    def policy(cls, smollm2_engine: TorchEngine) -> Iterator[Policy]:
        with serve_policy(
            [smollm2_engine], reference=TokenizerReference(smollm2_engine.tokenizer), model="smollm2"
        ) as policy:
            yield policy
