"""How tests find and run the repository's examples.

The examples are scripts in the checkout (``examples/<group>/<example>/<app>.py``), not an installed
package, so a test finds one from its own file and imports it by path::

    example = load_example(example_file("frameworks/langgraph/research_graph.py", near=__file__))
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from relight import cli
from relight.training.run_folder import RUNS_ENV

__all__ = ["assert_verified", "example_file", "load_example", "run_example"]


def example_file(relative: str, *, near: str | Path) -> Path:
    """The file ``examples/<relative>`` of the checkout that holds ``near`` (pass a test's ``__file__``)."""
    start = Path(near).resolve()
    for folder in start.parents:
        candidate = folder / "examples" / relative
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no examples/{relative} in any folder above {start}")


@functools.cache
def load_example(path: Path) -> ModuleType:
    """Import the example script at ``path`` once per process, as ``<framework>_example_<app>``.

    Cached like an import, so suites that share an example share its module (and its one
    ``relight.instrument`` call).
    """
    name = f"{path.parent.name}_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the example {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(path: Path, *args: str, cwd: Path) -> list[str]:
    """Run ``python <path> <args>`` as its README says and return the rows of the dev table it prints.

    Asserts that the command succeeded, and that ``relight verify`` finds every store it left (its run
    folders, under ``<cwd>/runs``) clean; a row is a line of the final table that names a rollout
    (``ro-…``), not the lines printed as each rollout ended (``rollout ro-…``).
    """
    runs = cwd / "runs"
    done = subprocess.run(
        [sys.executable, str(path), *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", RUNS_ENV: str(runs)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert_verified(runs)
    return [line for line in done.stdout.splitlines() if "ro-" in line and not line.startswith("rollout ro-")]


def assert_verified(folder: Path) -> None:
    """Assert that ``relight verify`` finds every SQLite store under ``folder`` clean."""
    for store in sorted(folder.rglob("store.db")):
        assert cli.main(["verify", "--store", f"sqlite:///{store}"]) == 0, f"relight verify found problems in {store}"
