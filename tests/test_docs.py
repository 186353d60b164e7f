"""What the README and the docs tell a user to run works: the CLI lines, and dev mode against the scripted model."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from relight.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)


def code_blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def relight_command_lines() -> list[tuple[str, list[str]]]:
    """Each ``relight …`` line of a bash block (a ``host$`` prompt and a continued line taken in)."""
    found: list[tuple[str, list[str]]] = []
    for page in PAGES:
        for block in code_blocks(page, "bash"):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"^[\w-]+\$ ", "", line.split("  #")[0].strip())
                if line.startswith("relight "):
                    found.append((f"{page.relative_to(ROOT)}: {line}", shlex.split(line)[1:]))
    return found


def test_the_readme_is_a_guide_under_10000_characters() -> None:
    assert len((ROOT / "README.md").read_text()) < 10_000


@pytest.mark.parametrize(("where", "words"), relight_command_lines(), ids=lambda value: str(value)[:60])
def test_every_relight_command_line_names_a_real_command_and_options(
    where: str, words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    command = [word for word in words if not word.startswith("-")][:2]
    help_text = ""
    for depth in (2, 1):  # `relight store serve`, else `relight rollouts` (whose next word is an argument)
        with pytest.raises(SystemExit) as exit_:
            main([*command[:depth], "--help"])
        output = capsys.readouterr().out
        if exit_.value.code == 0:
            help_text = output
            break
    assert help_text, f"{where}: `relight {' '.join(command)}` is not a command"
    for option in (word.split("=")[0] for word in words if word.startswith("--")):
        assert option in help_text, f"{where}: {option} is not an option of `relight {' '.join(command)}`"


def test_the_getting_started_dev_mode_runs_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The page's agent and its dev-mode block, run as written against the scripted model."""
    blocks = code_blocks(ROOT / "docs/getting-started.md", "python")
    agent = next(block for block in blocks if "@relight.rollout" in block)
    dev = next(block for block in blocks if "run_dev_example" in block)
    monkeypatch.setattr(sys, "argv", ["getting-started"])
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(
        compile(agent + "\n" + dev.replace("run_dev_example(", "results = run_dev_example(", 1), "page", "exec"),
        namespace,
    )
    [[result]] = namespace["results"]  # type: ignore[misc]
    assert result.reward == 1.0, result


@pytest.mark.parametrize(
    "readme",
    [
        ROOT / "README.md",
        *sorted(p for p in ROOT.glob("examples/**/README.md") if "node_modules" not in p.parts),
        *sorted(ROOT.glob("packages/*/README.md")),
    ],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_relative_links_in_readmes_resolve(readme: Path) -> None:
    """The docs site checks its own links strictly; the READMEs outside it are checked here."""
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.read_text()):
        if "://" not in target:
            assert (readme.parent / target).exists(), f"{readme.relative_to(ROOT)} links to {target}, which is missing"
