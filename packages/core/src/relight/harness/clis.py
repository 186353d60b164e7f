"""How each coding CLI is pointed at the gateway: its documented base-URL, key and model settings, with
telemetry, update checks and other outside traffic switched off, and the command that runs one task.

A CLI is anything with :meth:`CliAgent.command` and :meth:`CliAgent.configure`; :class:`CodexCLI` and
:class:`ClaudeCode` are the two most teams run. Each gets a fresh home folder per rollout, so no
setting, login or history of the user's own reaches a rollout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from relight.agent import LLM

__all__ = ["ClaudeCode", "CliAgent", "CodexCLI"]


@runtime_checkable
class CliAgent(Protocol):
    """A command-line agent the harness can run for one task."""

    name: str

    def command(self, prompt: str) -> list[str]:
        """The command line that does the task ``prompt`` without asking anyone anything, then exits."""
        ...

    def configure(self, home: Path, llm: LLM) -> dict[str, str]:
        """Write the CLI's settings under ``home`` (its fresh home folder) and return its environment variables."""
        ...


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@dataclass(frozen=True, slots=True)
class CodexCLI:
    """OpenAI's Codex CLI (npm ``@openai/codex``), on the Responses API.

    Settings, all documented: a ``model_providers`` entry with the attempt's base URL, the key read
    from ``RELIGHT_API_KEY`` and ``wire_api = "responses"`` (the only wire API Codex has), the model,
    update checks and analytics off. ``codex exec`` runs one task non-interactively; the sandbox mode
    lets it write in its working folder and its own ``TMPDIR`` (``workspace-write``, Codex's own
    sandbox, with the shared ``/tmp`` left out so that concurrent rollouts never meet there).

    Args:
        executable: the ``codex`` to run (a path, or a name on ``PATH``).
        sandbox: Codex's ``--sandbox`` mode.
        extra_config: more ``config.toml`` lines, as written.
    """

    executable: str = "codex"
    sandbox: str = "workspace-write"
    extra_config: str = ""
    name: str = "codex"

    def command(self, prompt: str) -> list[str]:
        return [self.executable, "exec", "--skip-git-repo-check", "--sandbox", self.sandbox, "--color", "never", prompt]

    def configure(self, home: Path, llm: LLM) -> dict[str, str]:
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            f"model = {_toml(llm.model)}\n"
            'model_provider = "relight"\n'
            "check_for_update_on_startup = false\n"
            f"{self.extra_config}\n"
            "[analytics]\n"
            "enabled = false\n\n"
            # Concurrent rollouts share the machine's /tmp: with it writable, Codex's sandbox masks paths
            # under it that another rollout's sandbox is making, and a command fails at random
            # ("Can't mount tmpfs on /newroot/tmp/.aws"). Each rollout's own TMPDIR stays writable.
            "[sandbox_workspace_write]\n"
            "exclude_slash_tmp = true\n\n"
            "[model_providers.relight]\n"
            'name = "relight"\n'
            f"base_url = {_toml(llm.base_url)}\n"
            'env_key = "RELIGHT_API_KEY"\n'
            'wire_api = "responses"\n'
        )
        return {"CODEX_HOME": str(codex_home), "RELIGHT_API_KEY": llm.api_key}


@dataclass(frozen=True, slots=True)
class ClaudeCode:
    """Anthropic's Claude Code (npm ``@anthropic-ai/claude-code``), on the Messages API.

    Settings, all documented environment variables: ``ANTHROPIC_BASE_URL`` (the attempt's URL without
    ``/v1``), ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``), ``ANTHROPIC_MODEL`` and the model for its
    small background calls (``ANTHROPIC_DEFAULT_HAIKU_MODEL``, the same model: every call goes through
    the gateway), and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``, ``DISABLE_AUTOUPDATER`` and
    ``DISABLE_TELEMETRY`` for the rest. ``claude -p`` runs one task; ``acceptEdits`` lets it write files.

    Args:
        executable: the ``claude`` to run.
        permission_mode: Claude Code's ``--permission-mode``.
        max_turns: ``--max-turns``, a bound on its agent loop (None: Claude Code's own).
        max_output_tokens: ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, its output budget per call (None: Claude
            Code's own, 32,000, which the gateway caps at what the model's context leaves).
    """

    executable: str = "claude"
    permission_mode: str = "acceptEdits"
    max_turns: int | None = None
    max_output_tokens: int | None = None
    name: str = "claude-code"

    def command(self, prompt: str) -> list[str]:
        command = [self.executable, "-p", prompt, "--permission-mode", self.permission_mode]
        if self.max_turns is not None:
            command += ["--max-turns", str(self.max_turns)]
        return command

    def configure(self, home: Path, llm: LLM) -> dict[str, str]:
        budget = self.max_output_tokens
        limit = {} if budget is None else {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(budget)}
        return limit | {
            "ANTHROPIC_BASE_URL": llm.base_url.removesuffix("/").removesuffix("/v1"),
            "ANTHROPIC_API_KEY": llm.api_key,
            "ANTHROPIC_MODEL": llm.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": llm.model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
