"""The core's import graph is the architecture map of docs/architecture.md: layered, acyclic, framework-free.

Every ``import`` in the core counts, at module level or inside a function, so a lazy import cannot
hide a circle. A part may import only parts of lower layers (and its own modules). The gateway, the
core's largest part, is layered inside too (:data:`GATEWAY`).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import relight

SOURCE = Path(relight.__file__).parent

LAYERS: list[set[str]] = [
    {"errors", "semconv"},
    {"records", "hookspecs", "engine", "agent", "policies", "_internal", "chat"},
    {"summaries", "algorithm", "run_folders"},
    {"store"},
    {"plugins", "stores"},
    {"tracing", "tracking"},
    {"gateway", "resources"},
    {"transitions", "runners", "harness", "scripted.scripts"},
    {"dashboard", "otlp", "rewards"},
    {"training", "integrity"},
    {"scripted", "__init__", "trained"},
    {"replay"},
    {"cli"},
]
"""Each part of ``relight`` by layer, lowest first (``scripted.scripts`` is the scripted model's vocabulary)."""

GATEWAY: list[set[str]] = [
    {"gateway._json", "gateway.urls", "gateway.stats", "gateway.overflow"},
    {"gateway.errors"},
    {"gateway.sessions", "gateway.upstreams", "gateway.dialects"},
    {"gateway.calls"},
    {"gateway.http"},
    {"gateway.server"},
    {"gateway"},
]
"""The gateway's own parts by layer: its shared vocabulary (JSON, URLs, counts, context overflows), its
errors, then the upstreams, sessions and foreign API dialects, the path of a call, the HTTP face, the
server that holds them together, and the package's public names."""

FOREIGN = {"torch", "verl", "vllm", "langchain", "langgraph", "autogen_core", "agents", "crewai"}
"""What the core never imports: training stacks and agent frameworks live in their own packages."""


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name or "__init__"] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The relight modules (dotted, without ``relight.``) and the top-level foreign packages ``path`` imports.

    ``from relight.x import y`` imports the module ``relight.x.y`` where there is one, else ``relight.x``.
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
            if name == "relight" or name.startswith("relight."):
                own.add(_dotted(name))
            else:
                foreign.add(name.split(".")[0])
    return own, foreign


def _dotted(name: str) -> str:
    """``relight.a.b`` as this file names modules: ``a.b`` (the package itself is ``__init__``)."""
    return name.removeprefix("relight").removeprefix(".") or "__init__"


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


def _layer_of(module: str) -> int:
    for candidate in (module, module.split(".")[0]):
        for index, layer in enumerate(LAYERS):
            if candidate in layer:
                return index
    raise AssertionError(f"relight.{module} belongs to no layer of the architecture map; add its part to LAYERS")


def _part(module: str) -> str:
    return module if module in set().union(*LAYERS) else module.split(".")[0]


def test_every_import_goes_to_a_lower_layer_or_stays_in_its_part() -> None:
    wrong = [
        f"relight.{source} imports relight.{target}"
        for source, targets in _graph().items()
        for target in targets
        if _part(source) != _part(target) and _layer_of(target) >= _layer_of(source)
    ]
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(sorted(wrong))


def test_the_gateway_imports_down_its_own_layers() -> None:
    def part(module: str) -> str:
        return next(name for name in sorted(set().union(*GATEWAY), key=len, reverse=True) if _within(module, name))

    def layer(module: str) -> int:
        return next(index for index, parts in enumerate(GATEWAY) if part(module) in parts)

    wrong = [
        f"relight.{source} imports relight.{target}"
        for source, targets in _graph().items()
        if _within(source, "gateway")
        for target in targets
        if _within(target, "gateway") and part(source) != part(target) and layer(target) >= layer(source)
    ]
    assert not wrong, "imports against the gateway's layers:\n" + "\n".join(sorted(wrong))


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".")


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


def test_the_core_imports_no_framework_or_training_stack() -> None:
    modules = _modules()
    found = {
        f"relight.{name} imports {package}"
        for name, path in modules.items()
        for package in _imports(path, modules)[1] & FOREIGN
    }
    assert not found, sorted(found)
