"""The compatibility kit against the real SmolLM2-135M-Instruct, served by relight-torch in-process and as a server."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from relight_testing.compat import ClientCompatibility, Policy, serve_policy
from relight_testing.models import TokenizerReference, served_process
from relight_torch.engine.torch_engine import TorchEngine

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


class TestServerProcess(ClientCompatibility):
    """The same model as `python -m relight_torch.server`, a process of its own, behind the gateway."""

    @pytest.fixture(scope="class")
    @classmethod
    def policy(cls, smollm2_path: Path) -> Iterator[Policy]:
        with (
            served_process(smollm2_path, name="smollm2") as served,
            serve_policy([served.base_url], reference=served.reference, model=served.model) as policy,
        ):
            yield policy
