"""An APO run's prompt versions as a user sees them: ``relight show``, ``relight export`` and the dashboard.

One search of the scripted world (apo_world.py) fills a run folder; each view is held to what that
search did: every version with its parent, validation reward, critique and diff; the best prompt
exported as resources a later run keeps fixed; each rollout naming the prompt version it ran with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from relight.cli import main
from relight.dashboard import Dashboard
from relight.resources.prompts import PROMPT_ITEM
from relight.stores.sqlite import SqliteStore


@pytest.fixture(scope="module")
def searched(world: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished search's run folder."""
    folder = tmp_path_factory.mktemp("searched")
    world.fit(folder, world.ScriptedOptimizer())
    return folder


def store_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'store.db'}"


def test_relight_show_prompts_lists_each_version_with_its_parent_reward_critique_and_diff(
    world: ModuleType, searched: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "--prompts", "--store", store_url(searched)]) == 0
    out = capsys.readouterr().out
    assert "4 prompt version(s)" in out
    assert "v0 from" not in out, "the seed has no parent to differ from"
    assert "critique: Critique: The rules leave out a kind of task." in out
    assert f"-{world.SEED}" in out
    assert f"+{world.S3}" in out
    assert main(["show", "--prompts", "--json", "--store", store_url(searched)]) == 0
    versions = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(v["prompts"]["system_prompt"], v["val_reward"]) for v in versions] == [
        (world.SEED, 0.5),
        (world.S1, 0.25),
        (world.S3, 0.75),
        (world.S4, 1.0),
    ]
    assert [v["selected"] for v in versions] == [[0], [], [2], [3]]


def test_relight_show_of_a_rollout_names_its_prompt_version(searched: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def child() -> tuple[str, int]:
        store = SqliteStore(searched / "store.db")
        try:
            rollout = next(r for r in await store.list_rollouts() if "-r2-child-t0" in r.rollout_id)
            assert rollout.resources_version is not None
            return rollout.rollout_id, rollout.resources_version
        finally:
            await store.close()

    rollout_id, version = asyncio.run(child())
    assert main(["show", rollout_id, "--store", store_url(searched)]) == 0
    assert f"resources v{version}: prompt version {version} (system_prompt)" in capsys.readouterr().out


def test_relight_export_writes_the_best_prompt_as_resources_to_keep_fixed(
    world: ModuleType, searched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "best.json"
    assert main(["export", "--format", "prompt", "--store", store_url(searched), "--out", str(out)]) == 0
    best = json.loads(out.read_text())
    assert best["system_prompt"] == world.S4
    assert best[PROMPT_ITEM]["version"] == 5
    assert main(["export", "--format", "prompt", "--prompt-version", "0", "--store", store_url(searched)]) == 0
    assert json.loads(capsys.readouterr().out)["system_prompt"] == world.SEED
    assert main(["export", "--format", "prompt", "--prompt-version", "1", "--store", store_url(searched)]) == 1
    assert "no prompt version 1" in capsys.readouterr().err, "version 1 republishes the seed: it is no prompt version"


@pytest.fixture
async def dashboard(searched: Path) -> AsyncIterator[Dashboard]:
    store = SqliteStore(searched / "store.db")
    try:
        async with Dashboard(store, port=0) as served:
            await served.catalog.refresh()
            yield served
    finally:
        await store.close()


async def test_the_dashboard_serves_each_prompt_version_with_its_diff(world: ModuleType, dashboard: Dashboard) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as client:
        reply = await client.get("/api/prompts")
    assert reply.status_code == 200
    versions: list[dict[str, Any]] = reply.json()["versions"]
    assert [(v["version"], v["parent"], v["val_reward"]) for v in versions] == [
        (0, None, 0.5),
        (2, 0, 0.25),
        (3, 0, 0.75),
        (5, 3, 1.0),
    ]
    assert versions[0]["diff"] is None
    assert f"+{world.S4}" in versions[3]["diff"]


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed at /usr/bin/chromium")
async def test_the_dashboards_runs_page_shows_the_prompt_versions_and_their_diffs(
    world: ModuleType, dashboard: Dashboard
) -> None:
    playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed")
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(f"{dashboard.url}?live=0")
            rows = page.locator("[data-testid=prompts] tbody tr")
            await rows.nth(3).wait_for()
            assert await rows.count() == 4
            assert await rows.nth(3).inner_text() == "v5\tv3\t3\tsystem_prompt\t1\t4\t3"
            await page.locator("[data-diff='5'] summary").click()  # a diff opens under its version
            assert f"+{world.S4}" in await page.locator("[data-diff='5'] pre").inner_text()
            assert errors == []
        finally:
            await browser.close()
