"""What users import keeps importing: the public names, and the old paths of moved modules (with a warning)."""

import importlib
import sys

import pytest

import relight_torch
from relight_torch._moved import MOVED


@pytest.mark.parametrize("name", relight_torch.__all__)
def test_every_public_name_imports_from_the_package(name: str) -> None:
    assert getattr(relight_torch, name).__name__ == name


@pytest.mark.parametrize(("old", "new"), MOVED.items())
def test_an_old_module_path_gives_the_module_at_its_new_path_with_a_deprecation_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__ is not None
    assert module.__spec__.name == new  # the module still says where it lives
