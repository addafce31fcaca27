"""Issue 27 in headless Chromium: an air-gapped site gets every page whole. Each page (and each
tab of a device) loads with every request recorded, and none goes anywhere but the dashboard's
own loopback address: no icon font, favicon or script from the internet."""

from __future__ import annotations

import urllib.parse

import pytest

pytest.importorskip("playwright.sync_api")

from tests.dashboard.browser import chromium_missing, chromium_page, wait_drawn
from tests.dashboard.small_fleet import SmallFleet

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)

from tests.dashboard.test_first_hour_browser import server  # noqa: E402, F401  (a fixture)

pytestmark = pytest.mark.browser  # drives headless Chromium

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def test_no_page_fetches_anything_from_outside(server: str, small_fleet: SmallFleet) -> None:  # noqa: F811
    f = small_fleet
    outside: list[str] = []
    seen = 0

    def record(request) -> None:  # type: ignore[no-untyped-def]
        nonlocal seen
        seen += 1
        url = urllib.parse.urlsplit(request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname not in LOOPBACK:
            outside.append(request.url)

    paths = [
        "/",
        f"/device?device={f.server}&range=15m",
        *(f"/device?device={f.jetson}&range=15m&tab={tab}" for tab in ("Host", "Latency", "Incidents", "Logs", "Hardware")),
        "/compare",
        "/incidents?range=24h",
        "/alerts",
    ]
    with chromium_page(height=1400) as page:
        page.on("request", record)
        # Nothing leaves this machine even if a request is made: an air-gapped site's view.
        page.route(lambda u: urllib.parse.urlsplit(u).hostname not in LOOPBACK, lambda route: route.abort())
        for path in paths:
            page.goto(server + path)
            wait_drawn(page)
            page.wait_for_timeout(1500)  # icons, fonts and Vega's charts load after the elements arrive
    assert seen > 20, "the pages loaded (and their requests were recorded)"
    assert not outside, f"requests that leave the machine: {sorted(set(outside))}"
