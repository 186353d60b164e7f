"""What the docs tell a user to run works: CLI lines, imports, and dev mode against the scripted model."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from relight.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
READMES = [
    ROOT / "README.md",
    *sorted(p for p in ROOT.glob("examples/**/README.md") if "node_modules" not in p.parts),
    *sorted(ROOT.glob("packages/*/README.md")),
]
DOCS = sorted(set(PAGES) | set(READMES))
"""Every page a user reads: the README, the docs site, the examples' and the packages' READMEs."""
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
INLINE_COMMAND = re.compile(r"`(relight [^`]+)`")


def code_blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def relight_command_lines() -> list[tuple[str, list[str]]]:
    """Each ``relight …`` line of a bash block (a ``host$`` prompt and a continued line taken in), and each
    inline ```relight …``` of the prose, as the words after ``relight``."""
    found: list[tuple[str, list[str]]] = []
    for page in DOCS:
        where = page.relative_to(ROOT)
        lines = [
            re.sub(r"^[\w-]+\$ ", "", line.split("  #")[0].strip())
            for block in code_blocks(page, "bash")
            for line in block.replace("\\\n", " ").splitlines()
        ]
        prose = FENCE.sub("", page.read_text())
        lines += [match.group(1) for match in INLINE_COMMAND.finditer(prose)]
        for line in lines:
            if line.startswith("relight "):
                # A synopsis's optional parts (`[--text]`) and alternatives (`a|b`) name real options too.
                found.append((f"{where}: {line}", shlex.split(line.replace("[", " ").replace("]", " "))[1:]))
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)  # type: ignore[arg-type]
    return {}


def listed_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options the command's ``--help`` lists (a hidden one is no option a doc may name)."""
    return {
        option: action
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    }


def command_problems(words: list[str]) -> list[str]:
    """What in ``relight WORDS`` the CLI lacks: a command that is not one, an option its ``--help`` does not
    list. Each option is looked up in the (sub)command it follows, as argparse reads it."""
    parser, command, problems = build_parser(), ["relight"], []
    words = list(words)
    while words:
        word = words.pop(0)
        if word == "--":  # the rest goes to the agent (`relight replay ... -- module:agent`)
            break
        if word.startswith("-"):
            action = listed_options(parser).get(word.split("=")[0])
            if action is None:
                problems.append(f"{word.split('=')[0]} is not an option of `{' '.join(command)}`")
            elif action.nargs != 0 and "=" not in word and words and not words[0].startswith("-"):
                words.pop(0)  # the option's value
            continue
        commands = subcommands(parser)
        if commands:
            if word not in commands:
                problems.append(f"`{' '.join([*command, word])}` is not a command")
                break
            parser = commands[word]
            command.append(word)
    return problems


@pytest.mark.parametrize(("where", "words"), relight_command_lines(), ids=lambda value: str(value)[:60])
def test_every_relight_command_line_names_a_real_command_and_options(where: str, words: list[str]) -> None:
    assert not command_problems(words), f"{where}: {'; '.join(command_problems(words))}"


def test_the_command_check_finds_a_missing_option_and_a_missing_command() -> None:
    assert command_problems(shlex.split("dashboard --store sqlite:///x.db --no-live --tokenizer tok")) == []
    assert command_problems(shlex.split("store serve --store memory:// --port 0")) == []
    assert command_problems(shlex.split("dashboard --store sqlite:///x.db --role-filter x")) == [
        "--role-filter is not an option of `relight dashboard`"
    ]
    assert command_problems(["store", "serve", "--prot=1"]) == ["--prot is not an option of `relight store serve`"]
    assert command_problems(["statistics"]) == ["`relight statistics` is not a command"]


IMPORT = re.compile(
    r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)|^[ \t]*import[ \t]+([^\n#]+)", re.MULTILINE
)


def python_imports() -> list[tuple[str, str, str | None]]:
    """Each name a python block imports, as (page, module, name): ``from m import a, b`` gives (m, a) and
    (m, b); ``import m.n as x`` gives (m.n, None)."""
    found: list[tuple[str, str, str | None]] = []
    for page in DOCS:
        where = str(page.relative_to(ROOT))
        for block in code_blocks(page, "python"):
            for match in IMPORT.finditer(block):
                module, names, plain = match.groups()
                if module is not None:
                    for name in names.strip("()").replace("\n", " ").split(","):
                        if name.strip():
                            found.append((where, module, name.split(" as ")[0].strip()))
                else:
                    for name in plain.split(","):
                        found.append((where, name.split(" as ")[0].strip(), None))
    return sorted(set(found))


def import_problem(module: str, name: str | None) -> str | None:
    """Why ``from MODULE import NAME`` (or ``import MODULE``) fails, or None where it works."""
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        return f"`import {module}` fails: {error}"
    if name is None or hasattr(imported, name):
        return None
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return f"{module} has no {name}"
    return None


def is_relights(module: str) -> bool:
    return module.split(".")[0] == "relight" or module.startswith("relight_")


@pytest.mark.parametrize(
    ("where", "module", "name"),
    [found for found in python_imports() if is_relights(found[1])],
    ids=lambda value: str(value)[:50],
)
def test_every_relight_name_the_docs_import_exists(where: str, module: str, name: str | None) -> None:
    problem = import_problem(module, name)
    assert problem is None, f"{where}: {problem}"


def test_every_other_name_the_docs_import_exists(tmp_path: Path) -> None:
    """The frameworks' and the examples' own modules, imported in a process of their own: CrewAI writes
    under HOME when imported, and a framework's import-time warnings are not the docs' concern. An example
    README's modules are its folder's; `make install` installs every library the docs import."""
    imports = [
        (where, module, name, str((ROOT / where).parent))
        for where, module, name in python_imports()
        if not is_relights(module)
    ]
    script = f"""
import importlib, importlib.util, json, sys, warnings
warnings.simplefilter("ignore")
sys.path[:0] = sorted({{folder for _, _, _, folder in {imports!r}}})
{inspect.getsource(import_problem)}
problems, missing = [], set()
for where, module, name, folder in {imports!r}:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        missing.add(module.split(".")[0])
    elif (problem := import_problem(module, name)) is not None:
        problems.append(f"{{where}}: {{problem}}")
print(json.dumps([problems, sorted(missing)]))
"""
    environment = {**os.environ, "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "CREWAI_DISABLE_TELEMETRY": "true"}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    problems, missing = json.loads(run.stdout.splitlines()[-1])
    assert not problems, "\n".join(problems)
    assert not missing, f"not installed here, so not checked: {missing}"


def test_the_import_check_finds_a_missing_name_and_module() -> None:
    assert import_problem("relight", "Trainer") is None
    assert import_problem("relight_torch", "vllm") is None  # a submodule, imported by the check
    assert import_problem("relight", "NoSuchTrainer") == "relight has no NoSuchTrainer"
    assert import_problem("relight.no_such_module", None) is not None


def test_the_readme_is_a_guide_under_10000_characters() -> None:
    assert len((ROOT / "README.md").read_text()) < 10_000


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


@pytest.mark.parametrize("readme", READMES, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_in_readmes_resolve(readme: Path) -> None:
    """The docs site checks its own links strictly; the READMEs outside it are checked here."""
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.read_text()):
        if "://" not in target:
            assert (readme.parent / target).exists(), f"{readme.relative_to(ROOT)} links to {target}, which is missing"
