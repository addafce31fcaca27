"""Issue 18's dashboard points in headless Chromium, on the small fleet (a reinstalled drone, an
8-GPU server, a Jetson, an imported device): what the browser shows, and a screenshot of each
view in ``$FLEETSCOPE_SCREENSHOTS`` (default: a temporary folder) for a person to look at."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.browser import chromium_missing, chromium_page, dashboard_server, drawn_charts, load
from tests.dashboard.small_fleet import LONG_MESSAGE, SmallFleet

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser  # each test drives headless Chromium
if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = Path(os.environ.get("FLEETSCOPE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="module")
def server(small_fleet: SmallFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard_server(small_fleet.url, tmp_path_factory.mktemp("dashboard") / "server.log") as base:
        yield base


@pytest.fixture(scope="module")
def page(server: str) -> Iterator:  # type: ignore[type-arg]
    with chromium_page(height=1400) as page:
        yield page


def _load(page, url: str, shot: Path, expect_cells: tuple[str, ...] = (), charts: int = 0) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    return load(page, url, shot, expect_cells, charts)


def _clean(text: str) -> None:
    for bad in ("Traceback", "could not be drawn", "could not be read", "Page not found"):
        assert bad not in text, bad


def _charts_drawn(page, at_least: int) -> None:  # type: ignore[no-untyped-def]
    drawn = drawn_charts(page, at_least)
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
    text, cells = _load(page, f"{server}/fleet", shots / "fleet-path.png", (small_fleet.imported,))
    _clean(text)  # "/fleet" used to show a "Page not found" box over the page
    assert "Fleet" in text and small_fleet.imported in cells
    row = cells.index(small_fleet.imported)
    assert "imported" in cells[row : row + 3]
    assert "device offline" not in text


def test_device_incident_strip_and_whole_history(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, cells = _load(
        page, f"{server}/device?device={f.drone}&range=15m&tab=Incidents", shots / "device-incidents.png",
        ("cuda_oom on the first install", "host_oom on the second install"), charts=1,
    )
    _clean(text)
    assert "Reinstalled: 2 installs" in text
    assert {"cuda_oom on the first install", "host_oom on the second install"} <= set(cells)
    strip = page.locator('[data-testid="stVegaLiteChart"]').first
    strip.screenshot(path=str(shots / "incident-strip.png"))
    # Two kinds, two rows: the dots (the error colour) sit at two heights, not on one line.
    assert len(_dot_rows(shots / "incident-strip.png")) == 2
    text, cells = _load(
        page, f"{server}/device?device={f.drone}&range=15m&tab=Logs", shots / "device-logs.png",
        (LONG_MESSAGE, "first install line"),
    )
    assert LONG_MESSAGE in cells and "first install line" in cells
    text, _ = _load(page, f"{server}/device?device={f.drone}&range=15m&tab=Latency", shots / "device-latency.png", charts=1)
    _clean(text)
    _charts_drawn(page, 1)


def test_gpu_picker_and_young_device(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, _ = _load(page, f"{server}/device?device={f.server}&range=1h", shots / "device-8-gpus.png", charts=5)
    _clean(text)
    assert all(f"GPU {i}" in text for i in range(8))
    _charts_drawn(page, 5)
    text, _ = _load(page, f"{server}/device?device={f.server}&range=1h&gpus=0,3", shots / "device-gpus-0-3.png", charts=5)
    _clean(text)
    _charts_drawn(page, 5)


def test_hardware_tab(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, cells = _load(page, f"{server}/device?device={f.server}&range=15m&tab=Hardware", shots / "hardware-server.png",
                        ("Gen*",))
    _clean(text)
    assert "Compute processes" in text and any(c.startswith("Gen") for c in cells)
    text, cells = _load(
        page, f"{server}/device?device={f.jetson}&range=15m&tab=Hardware", shots / "hardware-jetson.png",
        ("NVENC", "VDD_IN"),
    )
    _clean(text)
    assert "nvpmodel" in text and {"NVENC", "VDD_IN"} <= set(cells)


def test_week_chart_and_compare_link(page, server: str, small_fleet: SmallFleet, shots: Path) -> None:  # type: ignore[no-untyped-def]
    f = small_fleet
    text, _ = _load(page, f"{server}/incidents?range=7d", shots / "incidents-7d.png", charts=1)
    _clean(text)
    _charts_drawn(page, 1)
    page.locator('[data-testid="stVegaLiteChart"]').first.screenshot(path=str(shots / "incidents-7d-chart.png"))
    # The current bucket's bar (two incidents, stacked) stands tens of pixels tall at the right.
    assert _bar_height(shots / "incidents-7d-chart.png") >= 40
    query = urllib.parse.urlencode([("a", f"device: {f.drone}"), ("b", f"device: {f.server}"), ("op", "infer"),
                                    ("range", "1h")])
    text, cells = _load(page, f"{server}/compare?{query}", shots / "compare-link.png", ("Latency p99",))
    _clean(text)
    assert "Latency p99" in cells and "200" in cells, "drone-7's 200 timed calls, both installs"
    assert f"1 device: {f.drone}" in text and f"1 device: {f.server}" in text
    assert "infer" in text
