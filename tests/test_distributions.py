"""The nine distributions agree: one version, the core's compatible range pinned, metadata complete for PyPI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = sorted(ROOT.glob("packages/*/pyproject.toml"))
CORE_INIT = ROOT / "packages/core/src/relight/__init__.py"


def project(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text())["project"]


def core_version() -> Version:
    match = re.search(r'^__version__ = "([^"]+)"', CORE_INIT.read_text(), re.MULTILINE)
    assert match, "relight/__init__.py defines no __version__"
    return Version(match.group(1))


def requirements(meta: dict[str, object]) -> list[Requirement]:
    listed = list(meta.get("dependencies", []))  # type: ignore[arg-type]
    for extra in dict(meta.get("optional-dependencies", {})).values():  # type: ignore[arg-type]
        listed += extra
    return [Requirement(text) for text in listed]


def test_there_are_nine_distributions() -> None:
    names = {project(path)["name"] for path in PROJECTS}
    assert names == {
        "relight",
        "relight-testing",
        "relight-langgraph",
        "relight-autogen",
        "relight-openai-agents",
        "relight-crewai",
        "relight-torch",
        "relight-verl",
        "relight-apo",
    }


@pytest.mark.parametrize("path", PROJECTS, ids=lambda path: path.parent.name)
def test_every_distribution_has_the_core_version(path: Path) -> None:
    assert Version(str(project(path)["version"])) == core_version()


@pytest.mark.parametrize("path", PROJECTS, ids=lambda path: path.parent.name)
def test_relight_dependencies_pin_the_compatible_range(path: Path) -> None:
    version = core_version()
    lowest, below = Version(f"{version.major}.{version.minor}"), Version(f"{version.major}.{version.minor + 1}")
    for requirement in requirements(project(path)):
        if requirement.name == "relight" or requirement.name.startswith("relight-"):
            pinned = {str(specifier) for specifier in requirement.specifier}
            assert pinned == {f">={lowest}", f"<{below}"}, f"{path}: {requirement} should pin >={lowest},<{below}"


@pytest.mark.parametrize("path", PROJECTS, ids=lambda path: path.parent.name)
def test_metadata_is_complete_for_pypi(path: Path) -> None:
    meta = project(path)
    for field in ("description", "readme", "requires-python", "license", "license-files", "classifiers", "urls"):
        assert meta.get(field), f"{path}: [project] has no {field}"
    assert meta["requires-python"] == ">=3.11"
    readme = path.parent / str(meta["readme"])
    assert len(readme.read_text()) > 500, f"{readme} is too short for a PyPI page"
    for license_file in meta["license-files"]:  # type: ignore[union-attr]
        assert (path.parent / license_file).is_file()
    assert {"Homepage", "Documentation", "Repository", "Changelog"} <= set(meta["urls"])  # type: ignore[arg-type]


def test_the_changelog_has_the_current_version() -> None:
    assert f"## [{core_version()}]" in (ROOT / "CHANGELOG.md").read_text()
