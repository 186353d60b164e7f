"""Keep CrewAI in a temporary home, offline: it writes under HOME, the XDG folders and the temp folder.

Set before CrewAI is first imported (it creates folders at import) and undone after each test
module, so the rest of a test session keeps its own HOME. ``OTEL_SDK_DISABLED`` must stay unset:
it would switch off relight's OpenTelemetry SDK along with CrewAI's.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The real model, for test_smollm2.py; without relight-torch (a wheel's smoke test) the other tests still run.
with contextlib.suppress(ImportError):
    from relight_testing.models import smollm2_path, smollm2_tool_server  # noqa: F401


@pytest.fixture(scope="module", autouse=True)
def crewai_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("crewai-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        for variable, folder in (
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_CACHE_HOME", ".cache"),
            ("TMPDIR", "tmp"),
        ):
            (home / folder).mkdir(parents=True)
            patch.setenv(variable, str(home / folder))
        patch.setattr(tempfile, "tempdir", str(home / "tmp"))
        patch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
        patch.setenv("CREWAI_TRACING_ENABLED", "false")
        yield home
