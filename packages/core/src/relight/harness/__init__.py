"""Coding CLIs (Codex CLI, Claude Code) as relight agents, run unchanged through the gateway.

A CLI agent is a program, not a function relight can wrap, so the harness runs it as a process
for each rollout::

    from relight.harness import CliHarness, CodexCLI

    agent = CliHarness(
        CodexCLI(executable="node_modules/.bin/codex"),
        prompt=lambda task: task["prompt"],
        files=lambda task: task["files"],                      # the folder it starts in
        reward=lambda task, result: run_tests(result.workdir),  # its final state, exit status, output
        timeout=600,
    )
    relight.Trainer().dev(agent, tasks, base_url="http://localhost:8000/v1", model="Qwen/Qwen2.5-Coder-7B-Instruct")

Each rollout gets:

- a fresh working folder holding the task's files, and a fresh home folder (no login, setting or
  history of the user's reaches it; the CLI's settings are written there);
- the attempt's gateway base URL, key and model, through the CLI's documented settings only
  (:mod:`relight.harness.clis`), with telemetry, update checks and other outside traffic off;
- no network but the gateway: the CLI runs in a network namespace of its own (``unshare --net``)
  where only loopback exists and the gateway's port is relayed to the gateway. That is checked
  before the CLI starts (the namespace's devices, an outside connection refused) and reported
  in :attr:`HarnessResult.isolation`; where namespaces cannot be made the run fails, unless
  ``network="host"`` was chosen;
- a time limit, at which its whole process group is killed;
- a reward function called with the :class:`HarnessResult`: exit status, stdout and stderr, the
  folder (still there) and a snapshot of its text files.

Every model call the CLI makes goes through the gateway and is recorded like any agent's, exact
token ids and logprobs included, so training needs nothing else.
"""

from relight.harness.clis import ClaudeCode, CliAgent, CodexCLI
from relight.harness.run import CliHarness, HarnessError, HarnessResult, Network, run_cli, snapshot

__all__ = [
    "ClaudeCode",
    "CliAgent",
    "CliHarness",
    "CodexCLI",
    "HarnessError",
    "HarnessResult",
    "Network",
    "run_cli",
    "snapshot",
]
