"""The repository's examples: the dev-mode command line they share, and how tests find and run them.

Every example ends with the same command, which runs its agents once per task in dev mode against
a scripted model on 127.0.0.1 (offline), or against any OpenAI-compatible endpoint::

    if __name__ == "__main__":
        run_dev_example(research, tasks=TASKS, script=scripted_model)

The examples are scripts in the checkout (``examples/<framework>/<app>.py``), not an installed
package, so a test finds one from its own file and imports it by path::

    example = load_example(example_file("langgraph/research_graph.py", near=__file__))
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from pydantic import JsonValue

from relight.agent import Agent
from relight.testing.upstream import Script, ScriptedUpstream
from relight.trainer import DevResult, Trainer

__all__ = ["example_file", "load_example", "run_dev_example", "run_example"]


def run_dev_example(
    *agents: Agent, tasks: Sequence[JsonValue], script: Script, argv: Sequence[str] | None = None
) -> list[list[DevResult]]:
    """An example's command line: run each agent once per task in dev mode and print how each went.

    Without ``--base-url``, a :class:`~relight.testing.upstream.ScriptedUpstream` on 127.0.0.1 plays
    the model with ``script``, so the example runs offline; with it, the agents call that
    OpenAI-compatible endpoint's ``--model`` (``OPENAI_API_KEY`` is its key, if it needs one).

    Returns each agent's results, in the order given.
    """
    names = ", ".join(agent.name for agent in agents)
    parser = argparse.ArgumentParser(description=f"Run each task once with {names} in relight's dev mode.")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint; a scripted model on 127.0.0.1 by default")
    parser.add_argument("--model", help="the model to call at --base-url")
    args = parser.parse_args(argv)
    trainer = Trainer()
    if args.base_url is not None:
        if args.model is None:
            parser.error("--base-url needs --model, the name of a model the endpoint serves")
        return [trainer.dev(agent, tasks, base_url=args.base_url, model=args.model) for agent in agents]
    with ScriptedUpstream(script) as upstream:
        return [
            trainer.dev(agent, tasks, base_url=upstream.base_url, model=upstream.model, api_key="unused", vllm=True)
            for agent in agents
        ]


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

    Asserts that the command succeeded; a row is a printed line that names a rollout (``ro-…``).
    """
    done = subprocess.run(
        [sys.executable, str(path), *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "ro-" in line]
