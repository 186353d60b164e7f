"""Module paths of relight-torch 0.1 that moved when the package was grouped by concept, kept importable for now.

``import relight_torch.grpo`` (or ``from relight_torch.sft import SFT``) still works and gives the module at
its new path, with a :class:`DeprecationWarning` naming that path; the old paths go in a later minor version.
Only the paths users imported from are kept: the homes of the names of ``relight_torch.__all__`` and the
examples' recipe (every other moved module is listed in the changelog).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "keep_importable"]

MOVED = {
    "relight_torch.advantages": "relight_torch.algorithms.advantages",
    "relight_torch.grpo": "relight_torch.algorithms.grpo",
    "relight_torch.sft": "relight_torch.algorithms.sft",
    "relight_torch.tiny": "relight_torch.models.tiny",
    "relight_torch.recipe": "relight_torch.recipes.warm_start_grpo",
}
"""Each old module path and the module it names now."""


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and loads each as the module at its new path."""

    def __init__(self) -> None:
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old path goes in a later version)",
            DeprecationWarning,
            stacklevel=2,  # the line that imports (warnings skips the import system's own frames)
        )
        module = importlib.import_module(new)
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already loaded. The import system has just given it
        the old path's spec; it gets its own back, so that it still says where it lives."""
        old = module.__spec__
        assert old is not None
        module.__spec__ = self._own_specs.pop(old.name)


def keep_importable() -> None:
    """Make the old paths importable (once per process)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
