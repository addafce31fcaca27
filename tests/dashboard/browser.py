"""Driving the real dashboard in headless Chromium: start the dashboard server on a database,
open a page, wait until Streamlit has drawn it, and read its text and data-grid cells.

Shared by every browser test so that what "drawn" means is decided once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = os.environ.get("FLEETSCOPE_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@contextmanager
def dashboard_server(db_url: str, log: Path) -> Iterator[str]:
    """The dashboard process on ``db_url`` at a free loopback port; yields its base URL."""
    from tests.conftest import free_port

    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.dashboard", "--db", db_url, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dashboard exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dashboard did not answer within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()  # the dashboard process *is* Streamlit (exec), so this stops the server
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def chromium_page(height: int = 1500) -> Iterator:  # type: ignore[type-arg]
    """One headless Chromium page, 1600 pixels wide."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": height})
        finally:
            browser.close()


def wait_drawn(page) -> None:  # type: ignore[no-untyped-def]
    """Until Streamlit has drawn the page: a title, no skeletons, no "running" widget."""
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
    page.wait_for_selector('[data-testid="stSkeleton"]', state="detached", timeout=60_000)
    # Elements whose code is still loading (a cold browser's first page) show placeholders.
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stSkeletonElement\"], [data-testid=\"stStatusWidget\"]')",
        timeout=60_000,
    )


_ALL_CELLS = "[data-testid=stDataFrame] table td"


_DRAWN_CHARTS = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'


def drawn_charts(page, at_least: int = 1, timeout_ms: int = 30_000) -> int:  # type: ignore[no-untyped-def]
    """How many charts are drawn, once ``at_least`` are or ``timeout_ms`` has passed: a tab's charts
    can arrive seconds after its text on a busy machine."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length >= n",
                               arg=[_DRAWN_CHARTS, at_least], timeout=timeout_ms)
    except PlaywrightTimeout:
        pass
    return int(page.locator(_DRAWN_CHARTS).count())


def load(  # type: ignore[no-untyped-def]
    page, url: str, shot: Path | None, expect_cells: tuple[str, ...] = (), charts: int = 0
) -> tuple[str, list[str]]:
    """Open ``url``, wait until it is drawn, screenshot it to ``shot``; the page text and grid cells.

    ``expect_cells``: cell texts the caller will look for (``"Gen*"``: one that starts so), waited
    for up to a minute: a data grid's accessible table (what is read) fills after the grid
    appears, and on a busy machine the grids can arrive seconds after the headers around them.
    Cells that never come are for the caller's asserts to name. ``charts``: how many charts the
    caller expects drawn, waited for likewise (see ``drawn_charts``)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url)
    wait_drawn(page)
    if not expect_cells:
        # Without named cells: until every grid on view has rows. A grid in a closed expander, or
        # one that is empty, never gets any, hence the short bound; a caller that reads cells names them.
        try:
            page.wait_for_function(
                """() => [...document.querySelectorAll('[data-testid=stDataFrame]')]
                          .every(g => g.offsetParent === null || g.querySelector('table td'))""",
                timeout=10_000,
            )
        except PlaywrightTimeout:
            pass
    else:
        try:
            page.wait_for_function(
                """([selector, wanted]) => {
                    const have = new Set([...document.querySelectorAll(selector)].map(td => td.innerText.trim()));
                    return wanted.every(w => w.endsWith("*")
                        ? [...have].some(h => h.startsWith(w.slice(0, -1))) : have.has(w));
                }""",
                arg=[_ALL_CELLS, list(expect_cells)],
                timeout=60_000,
            )
        except PlaywrightTimeout:
            pass
    if charts:
        drawn_charts(page, charts)
    # Vega draws a chart after its element arrives: until every chart on view has its canvas.
    try:
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid=stVegaLiteChart]')]
                      .every(c => c.offsetParent === null || c.querySelector('canvas, svg'))""",
            timeout=10_000,
        )
    except PlaywrightTimeout:
        pass
    if shot is not None:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
    cells = page.locator(_ALL_CELLS).all_inner_texts()
    return page.inner_text("body"), cells
