"""Shared by every test under the repository: run folders go to a temporary folder, never the checkout.

``Trainer.fit`` writes a run folder for every run, under ``runs/`` in the working directory unless
told otherwise; tests that do not pass ``run_dir`` would leave one behind each time they run. The
session sets ``$RELIGHT_RUNS`` (which child processes inherit) to a folder of pytest's own.
"""

from collections.abc import Iterator

import pytest

from relight.training.run_folder import RUNS_ENV


@pytest.fixture(scope="session", autouse=True)
def run_folders_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RUNS_ENV, str(tmp_path_factory.mktemp("runs")))
        yield
