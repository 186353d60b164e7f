"""Dev mode from the command line: run an agent once per task against a scripted model or any endpoint.

An agent's script ends with one call, which runs its agents once per task in dev mode against a
scripted model on 127.0.0.1 (offline), or against any OpenAI-compatible endpoint given with
``--base-url`` and ``--model``::

    if __name__ == "__main__":
        run_dev_example(research, tasks=TASKS, script=scripted_model)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic import JsonValue

from relight.agent import Agent
from relight.scripted.scripts import Script
from relight.scripted.server import ScriptedUpstream
from relight.training.dev_report import DevResult
from relight.training.trainer import Trainer

__all__ = ["run_dev_example"]


def run_dev_example(
    *agents: Agent, tasks: Sequence[JsonValue], script: Script, argv: Sequence[str] | None = None
) -> list[list[DevResult]]:
    """An example's command line: run each agent once per task in dev mode and print how each went.

    Without ``--base-url``, a :class:`~relight.scripted.server.ScriptedUpstream` on 127.0.0.1 plays
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
