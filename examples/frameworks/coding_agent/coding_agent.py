"""Codex CLI or Claude Code fixing small Python functions, run unchanged through relight's gateway.

The agent is the CLI itself, as its users run it: relight's harness (:mod:`relight.harness`) starts it
for each rollout in a fresh folder holding the task's ``solution.py`` and tests, gives it the
attempt's base URL, key and model through the CLI's documented settings, cuts it off from every
network but the gateway (checked), and scores the folder it leaves: the fraction of the task's unit
tests that pass (:func:`coding_tasks.reward`).

Commands (see README.md)::

    python examples/frameworks/coding_agent/coding_agent.py --cli codex             # dev mode, scripted model, offline
    python examples/frameworks/coding_agent/coding_agent.py --cli claude --base-url URL --model NAME   # any endpoint
    python examples/frameworks/coding_agent/coding_train.py --cli codex --out runs/coding   # CPU training wiring

The CLIs come from npm, pinned in ``package.json``: ``make clis`` (``npm ci`` here) installs them
into ``examples/frameworks/coding_agent/node_modules``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import coding_tasks

import relight
from relight.harness import ClaudeCode, CliAgent, CliHarness, CodexCLI, Network
from relight.scripted import Reply, ScriptRequest, ToolCall

HERE = Path(__file__).resolve().parent
BIN = HERE / "node_modules" / ".bin"
CliName = Literal["codex", "claude"]


def executable(name: CliName) -> str:
    """The CLI installed by ``make clis``, else the one on ``PATH`` (the run says so if there is none)."""
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name) or name


def installed(name: CliName) -> bool:
    return shutil.which(executable(name)) is not None


def cli(name: CliName, *, max_output_tokens: int | None = None) -> CliAgent:
    if name == "codex":
        return CodexCLI(executable("codex"))
    return ClaudeCode(executable("claude"), max_output_tokens=max_output_tokens)


def agent(
    name: CliName, *, timeout: float = 600.0, network: Network = "isolated", max_output_tokens: int | None = None
) -> CliHarness:
    """The rollout: the CLI on one task, rewarded by the task's tests."""
    return CliHarness(
        cli(name, max_output_tokens=max_output_tokens),
        prompt=coding_tasks.prompt,
        files=lambda task: task["files"],
        reward=coding_tasks.reward,
        timeout=timeout,
        network=network,
    )


codex = agent("codex")
"""Codex CLI on a task (``coding_agent:codex``, as the GPU recipe names it)."""
claude = agent("claude")
"""Claude Code on a task."""


# -- the scripted model for offline dev mode -------------------------------------------------------


def scripted_model(request: ScriptRequest) -> Reply | str:
    """Writes the task's known solution with the CLI's own tool, then says it is done.

    Codex's shell tool (``exec_command``) writes the file with a heredoc; Claude Code's ``Write`` takes
    an absolute path, read from the working folder its system prompt names.
    """
    messages: list[dict[str, Any]] = list(request.body["messages"])
    if any(message["role"] == "tool" for message in messages):
        return "Done: solution.py passes its tests."
    text = json.dumps(messages)
    task = next((t for t in coding_tasks.TASKS if json.dumps(t["what"])[1:-1] in text), None)
    if task is None:
        return "I could not find the task."
    tools = {tool["function"]["name"] for tool in request.body.get("tools") or ()}
    if "exec_command" in tools:
        command = f"cat > solution.py <<'PYEOF'\n{task['solution']}PYEOF\n"
        return Reply(tool_calls=[ToolCall("exec_command", {"cmd": command})])
    if "Write" in tools:
        folder = _working_folder(messages)
        write = {"file_path": f"{folder}/solution.py", "content": task["solution"]}
        return Reply(tool_calls=[ToolCall("Write", write)])
    return "No tool to write files with."


def _working_folder(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        for line in json.dumps(message["content"]).replace("\\n", "\n").splitlines():
            if "Primary working directory:" in line:
                return line.split("Primary working directory:", 1)[1].strip()
    return "."


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", choices=["codex", "claude"], default="codex")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint; the scripted model when left out")
    parser.add_argument("--model", default="relight-coder")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--tasks", type=int, default=3, help="how many tasks to run")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--network", choices=["isolated", "host"], default="isolated")
    args = parser.parse_args(argv)
    rollout = agent(args.cli, timeout=args.timeout, network=args.network)
    tasks = coding_tasks.load("all")[: args.tasks]
    if args.base_url is not None:
        relight.Trainer().dev(rollout, tasks, base_url=args.base_url, model=args.model, api_key=args.api_key)
        return
    from relight.scripted import ScriptedUpstream

    with ScriptedUpstream(scripted_model, model=args.model) as upstream:
        relight.Trainer().dev(rollout, tasks, base_url=upstream.base_url, model=args.model, api_key="unused")


if __name__ == "__main__":
    main()
