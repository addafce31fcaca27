"""The real dashboard server in headless Chromium: each page loads and shows the fleet's
devices and incidents; a screenshot of each goes to artifacts/dashboard/ for a human to look at."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.browser import chromium_missing, chromium_page, dashboard_server, load
from tests.dashboard.pipeline import Pipeline

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser  # each test drives headless Chromium
if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard"


@pytest.fixture(scope="module")
def server(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard_server(pipeline.url, tmp_path_factory.mktemp("dashboard") / "server.log") as base:
        yield base


@pytest.fixture(scope="module")
def browser_page(server: str) -> Iterator:  # type: ignore[type-arg]
    with chromium_page(height=1500) as page:
        yield page


def _load(page, url: str, name: str, expect_cells: tuple[str, ...] = (), charts: int = 0) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    return load(page, url, ARTIFACTS / f"{name}.png", expect_cells, charts)


def _no_failure(text: str) -> None:
    assert "Traceback" not in text and "could not be drawn" not in text and "could not be read" not in text


def test_fleet_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(
        browser_page, f"{server}/", "fleet", (*pipeline.all_devices, "gpu_xid", "cuda_oom", "gpu-oom")
    )
    _no_failure(text)
    assert set(pipeline.all_devices) <= set(cells), "every device is listed"
    assert f"1 device offline: {pipeline.lost}" in text
    assert {"gpu_xid", "cuda_oom", "host_oom"} <= set(cells), "the open incidents"
    assert {"gpu-oom", "agent-offline"} <= set(cells), "the firing alerts"
    assert "Alert rules arrive in a later release" not in text
    assert browser_page.locator('[data-testid="stDataFrame"]').count() == 3


def test_device_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    device = pipeline.servers[0]
    text, _cells = _load(browser_page, f"{server}/device?device={device}&range=15m", "device", charts=5)
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
    text, cells = _load(browser_page, f"{server}/compare", "compare", ("Latency p99", "1,250 qps"))
    _no_failure(text)
    assert "Latency percentiles (merged histograms)" in text and "Benchmark records" in text
    assert "Latency p99" in cells and "41.5 qps" in cells and "1,250 qps" in cells
    assert pipeline.drones[0] in text, "the group lists its devices"


def test_incidents_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(
        browser_page, f"{server}/incidents", "incidents", ("cuda_oom", "host_oom", "gpu_xid", "trt_benchmark")
    )
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
    text, cells = _load(
        browser_page, f"{server}/incidents?incident={oom.id}", "incident-detail", ("2.00 GiB",)
    )
    _no_failure(text)
    assert oom.title in text and "expandable_segments:True" in text
    assert "2.00 GiB" in cells, "the requested size, in the facts table"


def test_alerts_page_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    text, cells = _load(
        browser_page, f"{server}/alerts", "alerts", ("gpu-oom", "gpu-hot", "agent-offline", "gpu-xid")
    )
    _no_failure(text)
    for section in ("Firing (1)", "Pending (1)", "Silenced (1)", "History (2)"):
        assert section in text, section
    assert {"gpu-oom", "gpu-hot", "agent-offline", "gpu-xid"} <= set(cells)
    assert f"device?device={pipeline.servers[0]}" in cells, "each alert links to its device"
    text, cells = _load(
        browser_page, f"{server}/alerts?alert={pipeline.alerts['oom']}", "alert-detail", ("delivered", "ops")
    )
    _no_failure(text)
    assert "rule gpu-oom" in text and "Open incident #" in text and f"Open {pipeline.servers[0]}" in text
    assert "delivered" in cells and "ops" in cells
    text, cells = _load(
        browser_page, f"{server}/alerts?label=fleet%3Ddrones&state=pending,silenced", "alerts-filtered",
        ("gpu-hot", "agent-offline"),
    )
    _no_failure(text)
    assert "gpu-hot" in cells and "agent-offline" in cells and "gpu-oom" not in cells


def test_device_page_alert_periods_in_a_browser(browser_page, server: str, pipeline: Pipeline) -> None:  # type: ignore[no-untyped-def]
    url = f"{server}/device?device={pipeline.hot}&range=15m"
    text, _cells = _load(browser_page, url, "device-alerts")
    for _ in range(3):  # a busy machine's alert job may fire after the first draw: a user reloads
        if "shaded spans with a bar above are alerts" in text:
            break
        time.sleep(5)
        text, _cells = _load(browser_page, url, "device-alerts")
    _no_failure(text)
    assert "shaded spans with a bar above are alerts" in text
