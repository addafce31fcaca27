"""Issue 18's dashboard points in headless Chromium, on the small fleet (a reinstalled drone, an
8-GPU server, a Jetson, an imported device): what the browser shows, and a screenshot of each
view in ``$FLEETSCOPE_SCREENSHOTS`` (default: a temporary folder) for a person to look at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.small_fleet import LONG_MESSAGE, SmallFleet

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser  # each test drives headless Chromium
CHROMIUM = os.environ.get("FLEETSCOPE_TEST_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = Path(os.environ.get("FLEETSCOPE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="module")
def server(small_fleet: SmallFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.conftest import free_port

    port = free_port()
    log = tmp_path_factory.mktemp("dashboard") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.dashboard", "--db", small_fleet.url, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
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
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def page(server: str) -> Iterator:  # type: ignore[type-arg]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser.new_page(viewport={"width": 1600, "height": 1400})
        browser.close()


def _load(page, url: str, shot: Path) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """Open ``url``, wait until Streamlit has drawn it, screenshot it; the page text and table cells."""
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
    page.wait_for_selector('[data-testid="stSkeleton"]', state="detached", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeletonElement\"]')", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    # A cold browser loads the data grid's code after the page: wait until every grid has cells.
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')].every(e => e.querySelector('table td'))",
        timeout=60_000,
    )
    # A data grid's accessible table (what is read below) fills after the grid appears; on a busy
    # machine that is seconds later. Wait for every grid to have its cells, for a while: a grid
    # that stays empty (no rows to show, or not drawn on this tab) is for the test's asserts to judge.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-testid=stDataFrame]')].every(g => g.querySelector('table td'))",
            timeout=20_000,
        )
    except PlaywrightTimeout:
        pass
    page.wait_for_timeout(2000)  # Vega draws its charts after the elements arrive
    page.screenshot(path=str(shot), full_page=True)
    cells = page.locator('[data-testid="stDataFrame"] table td').all_inner_texts()
    return page.inner_text("body"), cells


def _clean(text: str) -> None:
    for bad in ("Traceback", "could not be drawn", "could not be read", "Page not found"):
        assert bad not in text, bad


def _charts_drawn(page, at_least: int) -> None:  # type: ignore[no-untyped-def]
    drawn = page.locator('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg').count()
    assert drawn >= at_least, drawn


def _dot_rows(png: Path) -> list[int]:
    """The heights (pixel rows) at which red dots (errors, drawn a little transparent) are drawn,
    left of the legend."""
    from PIL import Image

    img = Image.open(png).convert("RGB")
    w, h = img.size
    px = img.load()
    hits = [y for y in range(h) for x in range(int(w * 0.85))
            if px[x, y][0] > 200 and px[x, y][0] - px[x, y][1] > 60 and px[x, y][0] - px[x, y][2] > 60]
    rows: list[int] = []
    for y in sorted(set(hits)):
        if not rows or y - rows[-1] > 12:
            rows.append(y)
        else:
            rows[-1] = y
    return rows


def _bar_height(png: Path) -> int:
    """Pixel rows holding a saturated colour (a bar) in the right tenth of a chart's image."""
    from PIL import Image

    img = Image.open(png).convert("RGB")
    w, h = img.size
    px = img.load()
    return sum(1 for y in range(h) if any(max(px[x, y]) - min(px[x, y]) > 80 for x in range(int(w * 0.9), w)))


def test_fleet_at_its_own_path(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(page, f"{server}/fleet", shots / "fleet-path.png")
    _clean(text)  # "/fleet" used to show a "Page not found" box over the page
    assert "Fleet" in text and small_fleet.imported in cells
    row = cells.index(small_fleet.imported)
    assert "imported" in cells[row : row + 3]
    assert "device offline" not in text


def test_device_incident_strip_and_whole_history(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, cells = _load(page, f"{server}/device?device={f.drone}&range=15m&tab=Incidents", shots / "device-incidents.png")
    _clean(text)
    assert "Reinstalled: 2 installs" in text
    assert {"cuda_oom on the first install", "host_oom on the second install"} <= set(cells)
    strip = page.locator('[data-testid="stVegaLiteChart"]').first
    strip.screenshot(path=str(shots / "incident-strip.png"))
    # Two kinds, two rows: the dots (the error colour) sit at two heights, not on one line.
    assert len(_dot_rows(shots / "incident-strip.png")) == 2
    text, cells = _load(page, f"{server}/device?device={f.drone}&range=15m&tab=Logs", shots / "device-logs.png")
    assert LONG_MESSAGE in cells and "first install line" in cells
    text, _ = _load(page, f"{server}/device?device={f.drone}&range=15m&tab=Latency", shots / "device-latency.png")
    _clean(text)
    _charts_drawn(page, 1)


def test_gpu_picker_and_young_device(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, _ = _load(page, f"{server}/device?device={f.server}&range=1h", shots / "device-8-gpus.png")
    _clean(text)
    assert all(f"GPU {i}" in text for i in range(8))
    _charts_drawn(page, 5)
    text, _ = _load(page, f"{server}/device?device={f.server}&range=1h&gpus=0,3", shots / "device-gpus-0-3.png")
    _clean(text)
    _charts_drawn(page, 5)


def test_hardware_tab(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, cells = _load(page, f"{server}/device?device={f.server}&range=15m&tab=Hardware", shots / "hardware-server.png")
    _clean(text)
    assert "Compute processes" in text and any(c.startswith("Gen") for c in cells)
    text, cells = _load(page, f"{server}/device?device={f.jetson}&range=15m&tab=Hardware", shots / "hardware-jetson.png")
    _clean(text)
    assert "nvpmodel" in text and {"NVENC", "VDD_IN"} <= set(cells)


def test_week_chart_and_compare_link(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, _ = _load(page, f"{server}/incidents?range=7d", shots / "incidents-7d.png")
    _clean(text)
    _charts_drawn(page, 1)
    page.locator('[data-testid="stVegaLiteChart"]').first.screenshot(path=str(shots / "incidents-7d-chart.png"))
    # The current bucket's bar (two incidents, stacked) stands tens of pixels tall at the right.
    assert _bar_height(shots / "incidents-7d-chart.png") >= 40
    query = urllib.parse.urlencode([("a", f"device: {f.drone}"), ("b", f"device: {f.server}"), ("op", "infer"),
                                    ("range", "1h")])
    text, cells = _load(page, f"{server}/compare?{query}", shots / "compare-link.png")
    _clean(text)
    assert "Latency p99" in cells and "200" in cells, "drone-7's 200 timed calls, both installs"
    assert f"1 device: {f.drone}" in text and f"1 device: {f.server}" in text
    assert "infer" in text
