"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

Screenshots of each page land in ``runs/artifacts/dashboard/`` (``RELIGHT_ARTIFACTS`` elsewhere),
for CI to keep and a person to look at. Skipped, saying why, where Chromium or Playwright is missing.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import relight
from relight import semconv
from relight.dashboard import Dashboard, decoder_of
from relight.records import Mode, RolloutStatus, SpanKind

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("RELIGHT_ARTIFACTS", Path(__file__).parents[2] / "runs" / "artifacts")) / "dashboard"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Chromium is not installed at /usr/bin/chromium (Debian: apt-get install chromium)"
)
playwright_api = pytest.importorskip(
    "playwright.async_api", reason="Playwright is not installed (pip install playwright)"
)


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            tab = await browser.new_page(viewport={"width": 1360, "height": 900})
            errors: list[str] = []
            tab.on("pageerror", lambda error: errors.append(str(error)))
            yield tab
            assert errors == [], f"the page's script failed: {errors}"
        finally:
            await browser.close()


@pytest.fixture
async def dashboard(trained: Any) -> AsyncIterator[Dashboard]:
    store = relight.open_store(trained.url)
    try:
        async with Dashboard(store, port=0, builder=trained.builder, decode=decoder_of([trained.engine])) as served:
            await served.catalog.refresh()
            yield served
    finally:
        await store.close()


async def shoot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def points(page: Any) -> int:
    return int(await page.get_attribute("#chart-reward", "data-points") or 0)


async def test_the_runs_page_draws_the_reward_curve(page: Any, dashboard: Dashboard) -> None:
    await page.goto(dashboard.url)
    await page.wait_for_selector("#chart-reward[data-points] canvas")
    curves = dashboard.catalog.curves()
    drawn = sum(p["train_reward"] is not None for p in curves) + sum(p["val_reward"] is not None for p in curves)
    assert await points(page) == drawn > 0
    assert await page.locator("#versions tbody tr").count() == len(curves)
    assert await page.locator(".u-legend").first.inner_text() != ""
    await page.wait_for_selector("#live.on")  # the event stream is open
    await shoot(page, "runs")


async def test_the_rollout_list_filters_and_paginates(page: Any, dashboard: Dashboard, trained: Any) -> None:
    total = dashboard.catalog.count
    await page.goto(f"{dashboard.url}#/rollouts?limit=5")
    rows = page.locator("[data-testid=rollouts] tbody tr")
    await page.wait_for_selector("[data-testid=rollouts] tbody tr")
    assert await rows.count() == 5
    assert await page.inner_text("[data-testid=range]") == f"1–5 of {total}"
    first_page = await rows.first.get_attribute("data-rollout")
    await page.click("[data-testid=next]")
    await page.wait_for_function("document.querySelector('[data-testid=range]')?.textContent.startsWith('6–')")
    assert await page.inner_text("[data-testid=range]") == f"6–10 of {total}"
    assert await rows.first.get_attribute("data-rollout") != first_page
    assert "before=" in page.url  # a keyset page: as quick deep in a large list as at its top
    await shoot(page, "rollouts")
    await page.click("[data-testid=prev]")
    await page.wait_for_function("document.querySelector('[data-testid=range]')?.textContent.startsWith('1–')")
    assert await rows.first.get_attribute("data-rollout") == first_page

    await page.select_option("select[name=status]", "failed")
    await page.click("[data-testid=filters] button")
    await page.wait_for_function("document.querySelector('[data-testid=range]')?.textContent.endsWith(' of 2')")
    assert await rows.count() == trained.samples
    assert set(await page.locator("[data-testid=rollouts] tbody .status").all_inner_texts()) == {"failed"}
    assert "#/rollouts?status=failed" in page.url  # the filter is in the address: a link keeps it

    validations = len(await dashboard.catalog.store.list_rollouts(mode=Mode.VAL))
    await page.goto(f"{dashboard.url}#/rollouts?reason=validation%20rollout&limit=500")
    await page.wait_for_function(
        f"document.querySelector('[data-testid=range]')?.textContent === '1–{validations} of {validations}'"
    )
    modes = await page.locator("[data-testid=rollouts] tbody tr td:nth-child(3)").all_inner_texts()
    assert modes
    assert set(modes) == {"val"}


async def test_a_rollout_page_shows_the_span_tree_and_the_tokens(page: Any, dashboard: Dashboard, trained: Any) -> None:
    store = dashboard.catalog.store
    retried = next(r for r in await store.list_rollouts(status=RolloutStatus.SUCCEEDED) if r.attempt_count == 2)
    spans = await store.query_spans(retried.rollout_id)
    await page.goto(f"{dashboard.url}#/rollout/{retried.rollout_id}")
    await page.wait_for_selector("[data-testid=span-tree]")
    assert await page.locator("[data-testid=span-tree]").count() == 2  # one timeline per attempt
    assert await page.locator("[data-testid=span-tree] .span").count() == len(spans)
    assert await page.locator("[data-testid=span-tree] .span[data-kind=llm]").count() == sum(
        s.kind is SpanKind.LLM for s in spans
    )

    calls = page.locator("[data-testid=call]")
    assert await calls.count() == 4
    texts = await calls.all_inner_texts()
    assert sum("not trained: retried attempt" in text for text in texts) == 2
    assert sum("not trained: filtered role" in text for text in texts) == 1
    trained_call = calls.filter(has_text=re.compile(r"solver\s+trained"))
    span_id = await trained_call.get_attribute("data-span")
    span = next(s for s in spans if s.span_id == span_id)
    ids = span.attributes[semconv.RESPONSE_TOKEN_IDS]
    assert isinstance(ids, list)
    tokens = trained_call.locator(".tok")
    assert await tokens.count() == len(ids)
    tokenizer = trained.engine.tokenizer
    shown = await tokens.all_inner_texts()
    assert [t.replace("↵\n", "\n") for t in shown] == [tokenizer.decode([i]) for i in ids]
    logprobs = [float(v) for v in await tokens.evaluate_all("(ts) => ts.map((t) => t.dataset.logprob)")]
    assert logprobs == pytest.approx(span.attributes[semconv.RESPONSE_LOGPROBS])
    colours = await tokens.evaluate_all("(ts) => ts.map((t) => getComputedStyle(t).backgroundColor)")
    assert all(colour.startswith("rgb(") for colour in colours)
    assert len(set(colours)) > 1
    await shoot(page, "rollout")


class _UrlWatcher(io.StringIO):
    """A console file that notices the line with the dashboard's URL."""

    def __init__(self) -> None:
        super().__init__()
        self.url = ""
        self.ready = threading.Event()

    def write(self, text: str) -> int:
        if (found := re.search(r"dashboard: (http://\S+)", text)) and not self.ready.is_set():
            self.url = found.group(1)
            self.ready.set()
        return super().write(text)


async def test_a_live_run_adds_points_without_a_reload(page: Any, training: Any, tmp_path: Path) -> None:
    """``fit(dashboard=True)`` serves the run; gates the test opens hold it at two known points.

    The second step waits for ``live`` until the page is up. The last validation waits for ``val``
    until the page has drawn the second step's point: the dashboard lives only as long as the run, so
    a run let go to its end could stop serving before a slow page (a loaded machine) refetched.
    """
    gate = training.gates["live"] = threading.Event()
    val_gate = training.gates["val"] = threading.Event()
    val_gate.set()  # open for the validations before the second step
    console = _UrlWatcher()
    run = [*training.tasks(3, 41), *training.tasks(3, 50, gate="live")]
    fit = asyncio.create_task(
        asyncio.to_thread(
            training.train,
            f"sqlite:///{tmp_path / 'live.db'}",
            train_tasks=run,
            val=training.tasks(1, 70, gate="val"),
            dashboard=True,
            console=Console(file=console, width=200),
        )
    )
    try:
        assert await asyncio.to_thread(console.ready.wait, 300), console.getvalue()
        await page.goto(console.url)
        await page.wait_for_selector("#chart-reward[data-points]")
        # The run stops at the gate after validating policy 1: val 0, train 0 and val 1 drawn.
        await page.wait_for_function(
            "+document.querySelector('#chart-reward').dataset.points >= 3", polling=250, timeout=300_000
        )
        before = await points(page)
        await page.evaluate("window.stillTheSamePage = true")
        val_gate.clear()  # the validation after the second step waits until the page has its point
        gate.set()
        await page.wait_for_function(
            f"+document.querySelector('#chart-reward').dataset.points > {before}", polling=250, timeout=300_000
        )
        assert await page.evaluate("window.stillTheSamePage") is True  # updated in place, never reloaded
        await shoot(page, "live")
    finally:
        gate.set()
        val_gate.set()
        history, _, engine = await fit
        engine.close()
    assert [int(row["step"]) for row in history if "reward_mean" in row] == [1, 2]


def test_the_documented_headless_screenshot_returns(trained: Any) -> None:
    """The README's command: ``relight dashboard --no-live`` and Chromium's ``--screenshot`` with a virtual
    time budget, which returns only once the page goes idle (a live page's event stream never lets it)."""
    command = [sys.executable, "-m", "relight.cli", "dashboard", "--store", trained.url, "--port", "0", "--no-live"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        url = re.search(r"(http://\S+)", line)
        assert url is not None, line
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "headless-command.png"
        shot.unlink(missing_ok=True)
        chromium = [str(CHROMIUM), *CHROMIUM_ARGS, f"--screenshot={shot}", "--virtual-time-budget=5000"]
        taken = subprocess.run([*chromium, url.group(1)], capture_output=True, text=True, timeout=120, check=False)
        assert taken.returncode == 0, taken.stderr
        assert shot.stat().st_size > 10_000  # a drawn page, not an empty one
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        if server.stdout is not None:
            server.stdout.close()


async def test_the_compare_page_overlays_the_runs_curves_and_their_differences(page: Any, two_runs: Any) -> None:
    """``relight dashboard --runs runs/`` without a store: the compare page is the home page."""
    from relight.dashboard.compared import ComparedRuns

    async with Dashboard(None, port=0, runs=ComparedRuns([two_runs.slow.parent]), live=False) as served:
        await page.goto(served.url)
        await page.wait_for_selector("#chart-compare-train[data-points] canvas")
        await page.wait_for_selector("#chart-compare-val[data-points] canvas")
        assert await page.get_attribute("#chart-compare-train", "data-series") == "2"
        assert await page.get_attribute("#chart-compare-train", "data-points") == "5"  # three steps and two
        assert await page.get_attribute("#chart-compare-val", "data-points") == "7"  # each validation, step 0 too
        legend = await page.locator("#chart-compare-train .u-legend").inner_text()
        assert "slow" in legend
        assert "fast" in legend
        assert await page.locator("[data-testid=compare-figures] tbody tr").count() == 2
        lr = await page.locator("[data-setting='algorithm.lr'] td").all_inner_texts()
        assert lr == ["algorithm.lr", "0.01", "0.001"]
        assert await page.locator("nav a").all_inner_texts() == ["Compare"]  # no store: nothing else to show
        await shoot(page, "compare")
