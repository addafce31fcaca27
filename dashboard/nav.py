"""The pages, defined once: the router builds ``st.navigation`` from them and pages link to
each other through ``go`` (``st.switch_page`` needs the same ``st.Page`` definition).

Page modules are imported lazily: they import this module to link, and the router imports
this module to route.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import streamlit as st

# name -> (module, title, Material icon)
PAGES: dict[str, tuple[str, str, str]] = {
    "fleet": ("page_fleet", "Fleet", ":material/dashboard:"),
    "alerts": ("page_alerts", "Alerts", ":material/notifications_active:"),
    "device": ("page_device", "Device", ":material/memory:"),
    "compare": ("page_compare", "Compare", ":material/compare_arrows:"),
    "incidents": ("page_incidents", "Incidents", ":material/report:"),
}
DEFAULT = "fleet"


def _render(name: str) -> Callable[[], None]:
    module = importlib.import_module(f"fleetscope.dashboard.{PAGES[name][0]}")
    return module.render


def page(name: str) -> Any:
    _module, title, icon = PAGES[name]
    return st.Page(_render(name), title=title, icon=icon, url_path=name)


def pages(default: str | None = None) -> list[Any]:
    """Every page at its own path (``/fleet``, ``/device``...), plus the root URL: a hidden page
    that draws the start page. (Streamlit serves a default page only at the root, so a page
    marked default would answer "Page not found" at its own path.)"""
    start = default if default in PAGES else DEFAULT
    _module, title, icon = PAGES[start]
    home = st.Page(_render(start), title=title, icon=icon, url_path="home", default=True, visibility="hidden")
    return [home, *(page(name) for name in PAGES)]


def go(name: str, **params: str) -> None:
    """Open another page with these query parameters (stops this run)."""
    # A page's identity is its url_path (not whether it is the default), so a fresh st.Page
    # with the same url_path and callable names the registered one.
    st.switch_page(page(name), query_params=params or None)
