"""relight-apo's import graph: layered, acyclic, on the core's public modules, free of training stacks and frameworks.

Every ``import`` counts, at module level or inside a function. APO improves prompts through any
OpenAI-compatible endpoint: it needs the core and an HTTP client, never torch, a trainer or a framework.
"""

from __future__ import annotations

import ast
from pathlib import Path

import relight_apo

SOURCE = Path(relight_apo.__file__).parent

LAYERS: list[set[str]] = [
    {"frontier", "prompts", "optimizer"},
    {"state", "proposal"},
    {"apo"},
    {"_plugin", "__init__"},
]
"""Each module by layer, lowest first: the pure parts, what one round needs, the search, the package's face."""

FOREIGN = {
    "torch",
    "verl",
    "vllm",
    "transformers",
    "relight_torch",
    "relight_verl",
    "gepa",
    "openai",
    "langchain",
    "langgraph",
    "autogen_core",
    "agents",
    "crewai",
}
ALLOWED = {"relight", "httpx", "pydantic"}


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """The relight_apo modules and the other top-level packages ``path`` imports (the standard library aside)."""
    own: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            if name.startswith("relight_apo."):
                own.add(name.removeprefix("relight_apo.").split(".")[0])
            elif name == "relight" or name.startswith("relight."):
                other.add(name)
            else:
                other.add(name.split(".")[0])
    return own, other


def _layer(module: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if module in layer)


def _modules() -> dict[str, Path]:
    return {path.stem: path for path in SOURCE.glob("*.py")}


def test_every_module_has_a_layer() -> None:
    assert set(_modules()) == set().union(*LAYERS)


def test_every_import_goes_to_a_lower_layer() -> None:
    wrong = [
        f"relight_apo.{name} imports relight_apo.{target}"
        for name, path in _modules().items()
        for target in _imports(path)[0]
        if _layer(target) >= _layer(name)
    ]
    assert not wrong, wrong


def test_it_needs_the_core_and_an_http_client_and_nothing_of_training_or_frameworks() -> None:
    for name, path in _modules().items():
        other = _imports(path)[1]
        assert not other & FOREIGN, f"relight_apo.{name} imports {sorted(other & FOREIGN)}"
        private = [module for module in other if module.startswith("relight.") and "._" in module]
        assert not private, f"relight_apo.{name} imports the core's private modules {private}"
        third_party = {module.split(".")[0] for module in other} - ALLOWED
        assert all(module in _stdlib() for module in third_party), f"relight_apo.{name}: {sorted(third_party)}"


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | {"__future__"}
