"""Fail when a public name of a distribution is missing from the built API reference.

Public means: a name in the ``__all__`` of each distribution's top-level package, and of each public
submodule of ``relight_testing`` (whose kits are imported by module, not from the top). The check
reads the sources (no import, so it needs none of the frameworks) and the built site's anchors, which
mkdocstrings names ``module.name``.

    python .ci/check_api_reference.py site      # after mkdocs build
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = {
    "relight": "packages/core/src/relight/__init__.py",
    "relight_langgraph": "packages/adapter-langgraph/src/relight_langgraph/__init__.py",
    "relight_autogen": "packages/adapter-autogen/src/relight_autogen/__init__.py",
    "relight_openai_agents": "packages/adapter-openai-agents/src/relight_openai_agents/__init__.py",
    "relight_crewai": "packages/adapter-crewai/src/relight_crewai/__init__.py",
    "relight_torch": "packages/trainer-torch/src/relight_torch/__init__.py",
    "relight_verl": "packages/trainer-verl/src/relight_verl/__init__.py",
    "relight_apo": "packages/apo/src/relight_apo/__init__.py",
}
TESTING = ROOT / "packages/testing/src/relight_testing"


def public_names(path: Path) -> list[str]:
    """The names in the module's ``__all__`` (a literal list or tuple of strings)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                return [ast.literal_eval(element) for element in node.value.elts]  # type: ignore[attr-defined]
    return []


def expected() -> set[str]:
    names = {f"{module}.{name}" for module, path in TOP_LEVEL.items() for name in public_names(ROOT / path)}
    for path in sorted(TESTING.glob("*.py")):
        if not path.name.startswith("_"):
            names |= {f"relight_testing.{path.stem}.{name}" for name in public_names(path)}
    return {name for name in names if not name.endswith(".__version__")}


def documented(site: Path) -> set[str]:
    anchors: set[str] = set()
    for page in site.glob("api/**/*.html"):
        anchors |= set(re.findall(r'id="([A-Za-z_][\w.]*)"', page.read_text()))
    return anchors


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "site")
    missing = sorted(expected() - documented(site))
    for name in missing:
        print(f"not in the API reference: {name}")
    if missing:
        print(f"{len(missing)} public name(s) missing: add them to a page under docs/api/.")
        return 1
    print(f"API reference: all {len(expected())} public names documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
