import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load_world() -> ModuleType:
    """``apo_world.py`` beside this file, imported once under its own name (it is also run as a script)."""
    if "apo_world" in sys.modules:
        return sys.modules["apo_world"]
    path = Path(__file__).with_name("apo_world.py")
    spec = importlib.util.spec_from_file_location("apo_world", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["apo_world"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def world() -> ModuleType:
    """The scripted world of the APO tests: its agent, agent model, optimiser and tasks (see apo_world.py)."""
    return _load_world()
