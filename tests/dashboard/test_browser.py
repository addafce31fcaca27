"""The real dashboard server in headless Chromium: each page loads and shows the fleet's
devices and incidents; a screenshot of each goes to artifacts/dashboard/ for a human to look at."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.pipeline import Pipeline

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser  # each test drives headless Chromium
CHROMIUM = os.environ.get("FLEETSCOPE_TEST_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("dashboard") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.dashboard", "--db", pipeline.url, "--port", str(port)],
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


@pytest.fixture(scope="module")
def browser_page(server: str) -> Iterator:  # type: ignore[type-arg]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1500})
        yield page
        browser.close()


def _load(page, url: str, name: str) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """Open ``url``, wait until Streamlit has drawn it, screenshot it; the page text and table cells."""
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
    page.wait_for_selector('[data-testid="stSkeleton"]', state="detached", timeout=60_000)
    # Elements whose code is still loading (a cold browser's first page) show placeholders.
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stSkeletonElement\"]')", timeout=60_000
    )
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000
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
    page.wait_for_timeout(1500)  # Vega draws its charts after the elements arrive
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    # Data grids draw on a canvas; their cells are also in an accessible table, which is what is read.
    cells = page.locator('[data-testid="stDataFrame"] table td').all_inner_texts()
    return page.inner_text("body"), cells


def _no_failure(text: str) -> None:
    assert "Traceback" not in text and "could not be drawn" not in text and "could not be read" not in text


def test_fleet_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(browser_page, f"{server}/", "fleet")
    _no_failure(text)
    assert set(pipeline.all_devices) <= set(cells), "every device is listed"
    assert f"1 device offline: {pipeline.lost}" in text
    assert {"gpu_xid", "cuda_oom", "host_oom"} <= set(cells), "the open incidents"
    assert {"gpu-oom", "agent-offline"} <= set(cells), "the firing alerts"
    assert "Alert rules arrive in a later release" not in text
    assert browser_page.locator('[data-testid="stDataFrame"]').count() == 3


def test_device_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    device = pipeline.servers[0]
    text, _cells = _load(browser_page, f"{server}/device?device={device}&range=15m", "device")
    _no_failure(text)
    assert device in text and "2x NVIDIA A100-SXM4-80GB" in text
    assert "GPU utilisation" in text and "2 s buckets from raw samples" in text
    assert browser_page.locator('[data-testid="stVegaLiteChart"]').count() >= 5
    assert (
        browser_page.locator(
            '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
        ).count()
        >= 5
    )


def test_compare_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(browser_page, f"{server}/compare", "compare")
    _no_failure(text)
    assert "Latency percentiles (merged histograms)" in text and "Benchmark records" in text
    assert "Latency p99" in cells and "41.5 qps" in cells and "1,250 qps" in cells
    assert pipeline.drones[0] in text, "the group lists its devices"


def test_incidents_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(browser_page, f"{server}/incidents", "incidents")
    _no_failure(text)
    assert {"cuda_oom", "host_oom", "gpu_xid", "trt_benchmark"} <= set(cells)
    oom_row = next(i for i, c in enumerate(cells) if c == "cuda_oom")
    assert pipeline.servers[0] in cells[max(0, oom_row - 3) : oom_row]
    from sqlalchemy.orm import Session

    from fleetscope.collector.query import search_incidents
    from fleetscope.collector.storage.engine import make_engine

    engine = make_engine(pipeline.url, create=False)
    with Session(engine) as s:
        oom = search_incidents(session=s, since_ns=0, until_ns=time.time_ns() + 10**9, kinds=["cuda_oom"])[0]
    engine.dispose()
    text, cells = _load(browser_page, f"{server}/incidents?incident={oom.id}", "incident-detail")
    _no_failure(text)
    assert oom.title in text and "expandable_segments:True" in text
    assert "2.00 GiB" in cells, "the requested size, in the facts table"


def test_alerts_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(browser_page, f"{server}/alerts", "alerts")
    _no_failure(text)
    for section in ("Firing (1)", "Pending (1)", "Silenced (1)", "History (2)"):
        assert section in text, section
    assert {"gpu-oom", "gpu-hot", "agent-offline", "gpu-xid"} <= set(cells)
    assert f"device?device={pipeline.servers[0]}" in cells, "each alert links to its device"
    text, cells = _load(browser_page, f"{server}/alerts?alert={pipeline.alerts['oom']}", "alert-detail")
    _no_failure(text)
    assert "rule gpu-oom" in text and "Open incident #" in text and f"Open {pipeline.servers[0]}" in text
    assert "delivered" in cells and "ops" in cells
    text, cells = _load(
        browser_page, f"{server}/alerts?label=fleet%3Ddrones&state=pending,silenced", "alerts-filtered"
    )
    _no_failure(text)
    assert "gpu-hot" in cells and "agent-offline" in cells and "gpu-oom" not in cells


def test_device_page_alert_periods_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, _cells = _load(browser_page, f"{server}/device?device={pipeline.hot}&range=15m", "device-alerts")
    _no_failure(text)
    assert "shaded spans with a bar above are alerts" in text
