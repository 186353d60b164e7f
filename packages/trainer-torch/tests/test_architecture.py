"""relight-torch's import graph follows its concepts: layered, acyclic, free of frameworks and of verl.

Every ``import`` counts, at module level, inside a function or under ``TYPE_CHECKING``, so a lazy import
cannot hide a circle. A part may import only parts of lower layers (and its own modules).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import relight_torch

SOURCE = Path(relight_torch.__file__).parent

LAYERS: list[set[str]] = [
    {"_moved"},
    {"models"},
    {"learner"},
    {"engine"},
    {"models.tiny"},
    {"algorithms"},
    {"vllm"},
    {"recipes"},
    {"demo"},
    {"server", "__init__"},
    {"trained_policy"},
    {"_plugin"},
]
"""Each part of ``relight_torch`` by layer, lowest first.

``models`` is the name a model folder goes by and SmolLM2's folder; the tiny model sits above the engine,
which serves it. The engine samples with the learner's layout (``learner.packing``), so the logprobs it
records are the ones an update recomputes. ``vllm`` serves and trains the policy of ``algorithms``'
GRPO on a vLLM server; ``server`` is ``python -m relight_torch.server``. ``trained_policy`` serves and exports
a finished run's policy (on vLLM or the engine ``server`` serves) for ``relight serve`` and ``relight
export-model``; ``_plugin`` announces it to relight."""

FOREIGN = {
    "verl",
    "vllm",
    "relight_verl",
    "relight_testing",
    "pytest",
    "langchain",
    "langgraph",
    "autogen_core",
    "agents",
    "crewai",
    "relight_langgraph",
    "relight_autogen",
    "relight_openai_agents",
    "relight_crewai",
}
"""What relight-torch never imports: verl and vLLM (each runs in an environment of its own), agent
frameworks and their adapters, and test kits."""

TORCH_FREE = {"vllm.admin", "vllm.server_process", "vllm.upstream", "vllm.policy_serving", "vllm._watchdog"}
"""The vLLM serving modules relight-verl shares: the learner writes the weights, so these never import torch."""

TOP_LEVEL_MODULES = 10
"""At most this many modules beside the concept packages."""


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name or "__init__"] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The relight_torch modules (dotted, without ``relight_torch.``) and the top-level foreign packages
    ``path`` imports.

    ``from relight_torch.x import y`` imports the module ``relight_torch.x.y`` where there is one, else
    ``relight_torch.x``.
    """
    own: set[str] = set()
    foreign: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            names = [
                f"{module}.{alias.name}" if _dotted(f"{module}.{alias.name}") in modules else module
                for alias in node.names
            ]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name == "relight_torch" or name.startswith("relight_torch."):
                own.add(_dotted(name))
            else:
                foreign.add(name.split(".")[0])
    return own, foreign


def _dotted(name: str) -> str:
    """``relight_torch.a.b`` as this file names modules: ``a.b`` (the package itself is ``__init__``)."""
    return name.removeprefix("relight_torch").removeprefix(".") or "__init__"


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name not in modules:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        own, _ = _imports(path, modules)
        for target in own:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != name:
                graph[name].add(resolved)
    return graph


def _part(module: str) -> str:
    return module if module in set().union(*LAYERS) else module.split(".")[0]


def _layer_of(module: str) -> int:
    for index, layer in enumerate(LAYERS):
        if _part(module) in layer:
            return index
    raise AssertionError(f"relight_torch.{module} belongs to no layer; add its part to LAYERS")


def test_every_import_goes_to_a_lower_layer_or_stays_in_its_part() -> None:
    wrong = [
        f"relight_torch.{source} imports relight_torch.{target}"
        for source, targets in _graph().items()
        for target in targets
        if _part(source) != _part(target) and _layer_of(target) >= _layer_of(source)
    ]
    assert not wrong, "imports against relight-torch's layers:\n" + "\n".join(sorted(wrong))


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(_modules()):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_relight_torch_imports_no_framework_verl_or_test_kit() -> None:
    modules = _modules()
    found = {
        f"relight_torch.{name} imports {package}"
        for name, path in modules.items()
        for package in _imports(path, modules)[1] & FOREIGN
    }
    assert not found, sorted(found)


def test_the_vllm_serving_modules_import_no_torch() -> None:
    modules = _modules()
    found = {
        f"relight_torch.{name} imports {package}"
        for name in TORCH_FREE
        for package in _imports(modules[name], modules)[1] & {"torch", "transformers", "peft"}
    }
    assert not found, sorted(found)


def test_the_top_level_holds_concept_packages_and_few_modules() -> None:
    top = sorted(path.name for path in SOURCE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top
