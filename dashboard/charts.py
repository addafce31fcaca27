"""Vega-Lite chart specs, written as plain dicts.

Why not Altair or ``st.line_chart``: both build and validate an Altair object per chart, which
costs tens of milliseconds each; a device page has a dozen charts and a budget of 1.5 s. A
dict spec goes to the browser as is. Every time chart takes the page's time ``domain`` so that
all charts of a page (and the incident strip) share one x axis, and can carry shaded bands
(throttling) and incident markers as extra layers with their own named datasets.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pandas as pd
import streamlit as st

from fleetscope.dashboard import fmt

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
HEIGHT = 220
# Distinct hues for GPUs and groups (the theme's first two colours are both blue).
PALETTE = [
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#bab0ac",
]


def _records(df: pd.DataFrame) -> pd.DataFrame:
    """Datasets go to Streamlit as frames: it serialises them to Arrow for the browser."""
    return df.reset_index(drop=True)


def _time_format(domain: tuple[int, int] | None) -> str | None:
    """24-hour labels (Vega's default is 12-hour without am/pm), with dates for long ranges."""
    if not domain:
        return None
    span_s = (domain[1] - domain[0]) / 1000
    if span_s <= 600:
        return "%H:%M:%S"
    if span_s <= 36 * 3600:
        return "%H:%M"
    return "%b %d %H:%M"


def _x(domain: tuple[int, int] | None, field: str = "t") -> dict[str, Any]:
    # At most ~8 ticks: finer ticks than the label's unit (30 s ticks under an %H:%M label)
    # would print the same label twice.
    axis: dict[str, Any] = {"labelOverlap": True, "grid": False, "tickCount": 8}
    if _time_format(domain):
        axis["format"] = _time_format(domain)
    x: dict[str, Any] = {"field": field, "type": "temporal", "title": None, "axis": axis}
    if domain:
        # ISO strings, not epoch numbers: Streamlit's Vega-Lite embedding ignores (collapses)
        # a numeric domain on a temporal scale, while data fields in epoch ms work.
        x["scale"] = {"domain": [_iso(d) for d in domain]}
    return x


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _legend() -> dict[str, Any]:
    # Wrapped in rows of four: a single row is clipped by the chart's width (eight GPUs showed five).
    return {"orient": "top", "direction": "horizontal", "columns": 4, "title": None, "symbolSize": 60, "labelLimit": 260}


def time_chart(
    df: pd.DataFrame,
    *,
    title: str,
    unit: str,
    domain: tuple[int, int] | None,
    y: str = "value",
    series: str | None = "series",
    number_format: str = ".1f",
    y_domain: tuple[float, float] | None = None,
    bands: pd.DataFrame | None = None,
    markers: pd.DataFrame | None = None,
    alerts: pd.DataFrame | None = None,
    area: bool = False,
    height: int = HEIGHT,
) -> dict[str, Any]:
    """A line (or area) chart over time, one line per ``series`` value.

    ``bands`` shade throttled periods; ``alerts`` (``frames.alert_spans``) shade alert periods
    lightly in their severity's colour with a ribbon along the top; ``markers`` draw incidents.
    """
    if "gap" in df.columns:
        # Vega breaks a line at every missing value: only a real gap (``frames``) may break it. A
        # bucket without this reading (one sample: no rate) is left out, its neighbours joined.
        df = df[df[y].notna() | df["gap"].astype(bool)]
    y_enc: dict[str, Any] = {"field": y, "type": "quantitative", "title": unit, "axis": {"tickCount": 4}}
    if y_domain:
        y_enc["scale"] = {"domain": list(y_domain)}
    enc: dict[str, Any] = {
        "x": _x(domain),
        "y": y_enc,
        "tooltip": [
            {"field": "t", "type": "temporal", "title": "time", "format": TIME_FORMAT},
            *([{"field": series, "type": "nominal", "title": "series"}] if series else []),
            {"field": y, "type": "quantitative", "title": unit, "format": number_format},
        ],
    }
    if series:
        single = df.empty or df[series].nunique() <= 1
        enc["color"] = {
            "field": series,
            "type": "nominal",
            "title": None,
            "legend": None if single else _legend(),
            "scale": {"range": PALETTE},
        }
    mark: dict[str, Any] = (
        {"type": "area", "opacity": 0.35, "line": True} if area else {"type": "line", "strokeWidth": 1.5}
    )
    if len(df) <= 2000:  # smoothing costs the browser time per point; thousands of points need none
        mark["interpolate"] = "monotone"
    if len(df) < 40:  # a handful of buckets: show the points, a lone one draws no line at all
        mark["point"] = {"size": 30, "filled": True}
    # Only the columns this chart encodes: the GPU frame has fifteen, and every chart's data
    # travels to the browser on its own.
    datasets: dict[str, Any] = {"main": _records(df[[c for c in ("t", series, y) if c and c in df.columns]])}
    layers: list[dict[str, Any]] = []
    if bands is not None and not bands.empty:
        datasets["bands"] = _records(bands)
        layers.append(
            {
                "data": {"name": "bands"},
                "mark": {"type": "rect", "opacity": 0.16},
                "encoding": {
                    "x": _x(domain, "start"),
                    "x2": {"field": "end"},
                    "color": {"field": "color", "type": "nominal", "scale": None, "legend": None},
                    "tooltip": [{"field": "reason", "title": "throttled"}],
                },
            }
        )
    if alerts is not None and not alerts.empty:
        datasets["alerts"] = _records(alerts)
        layers += alert_layers(domain)
    layers.append({"data": {"name": "main"}, "mark": mark, "encoding": enc})
    if markers is not None and not markers.empty:
        datasets["markers"] = _records(markers)
        layers.append(marker_layer(domain))
    return {
        "height": height,
        "title": {"text": title, "anchor": "start", "fontSize": 13},
        "datasets": datasets,
        "layer": layers,
        "resolve": {"scale": {"color": "independent"}, "legend": {"color": "independent"}},
    }


def _severity_scale() -> dict[str, Any]:
    return {"domain": list(fmt.SEVERITY_COLORS), "range": list(fmt.SEVERITY_COLORS.values())}


def alert_layers(domain: tuple[int, int] | None) -> list[dict[str, Any]]:
    """Alert periods: a light full-height shade, and a ribbon just above the plot (where it hides
    no line), by severity. The spans are cut to the chart's range (``frames.alert_spans``)."""
    color = {"field": "severity", "type": "nominal", "legend": None, "scale": _severity_scale()}
    tooltip = [
        {"field": "rule", "title": "alert"},
        {"field": "state"},
        {"field": "severity"},
        {"field": "from"},
        {"field": "to"},
        {"field": "summary"},
    ]
    x = _x(domain, "start")
    return [
        {
            "data": {"name": "alerts"},
            "mark": {"type": "rect", "opacity": 0.08},
            "encoding": {"x": x, "x2": {"field": "end"}, "color": color, "tooltip": tooltip},
        },
        {
            "data": {"name": "alerts"},
            "mark": {"type": "rect"},
            "encoding": {
                "x": x,
                "x2": {"field": "end"},
                "y": {"value": -7},
                "y2": {"value": -2},
                "color": color,
                "opacity": {"field": "opacity", "type": "quantitative", "scale": None},
                "tooltip": tooltip,
            },
        },
    ]


def marker_layer(domain: tuple[int, int] | None) -> dict[str, Any]:
    """Incidents as dashed vertical rules, coloured by severity."""
    return {
        "data": {"name": "markers"},
        "mark": {"type": "rule", "strokeDash": [4, 3], "strokeWidth": 2},
        "encoding": {
            "x": _x(domain),
            "color": {
                "field": "severity",
                "type": "nominal",
                "legend": None,
                "scale": {"domain": list(fmt.SEVERITY_COLORS), "range": list(fmt.SEVERITY_COLORS.values())},
            },
            "tooltip": [{"field": "when", "title": "time"}, {"field": "kind"}, {"field": "title"}],
        },
    }


def incident_strip(
    markers: pd.DataFrame,
    *,
    domain: tuple[int, int] | None,
    alerts: pd.DataFrame | None = None,
    row_px: int = 28,
) -> dict[str, Any]:
    """Incidents on the shared time axis: one row per kind, a dot per incident; alert periods shaded."""
    datasets: dict[str, Any] = {"markers": _records(markers)}
    layers: list[dict[str, Any]] = []
    if alerts is not None and not alerts.empty:
        datasets["alerts"] = _records(alerts)
        layers += alert_layers(domain)
    size: int | dict[str, int]
    if markers.empty:  # alerts only: an empty point layer still sets the axis
        size = 40
    else:
        # A row of ``row_px`` per kind. Not a height in pixels: the stretch-to-width embedding
        # ignores it, and every kind was drawn on one row, their names over each other.
        size = {"step": row_px}
    return {
        "height": size,
        "title": {
            "text": "Incidents and alerts" if layers else "Incidents",
            "anchor": "start",
            "fontSize": 13,
        },
        "datasets": datasets,
        "layer": [*layers, _strip_points(domain)],
        "resolve": {"scale": {"color": "independent"}, "legend": {"color": "independent"}},
    }


def _strip_points(domain: tuple[int, int] | None) -> dict[str, Any]:
    return {
        "data": {"name": "markers"},
        "mark": {"type": "point", "filled": True, "size": 80},
        "encoding": {
            "x": _x(domain),
            "y": {"field": "kind", "type": "nominal", "title": None},
            "color": {
                "field": "severity",
                "type": "nominal",
                "title": None,
                "scale": {"domain": list(fmt.SEVERITY_COLORS), "range": list(fmt.SEVERITY_COLORS.values())},
                "legend": {"orient": "right", "title": None},
            },
            "tooltip": [
                {"field": "when", "title": "time"},
                {"field": "kind"},
                {"field": "severity"},
                {"field": "title"},
            ],
        },
    }


def count_bars(
    df: pd.DataFrame, *, domain: tuple[int, int] | None, title: str, height: int = 230
) -> dict[str, Any]:
    """Stacked bars from (t, end, kind, count) rows: incidents per bucket by kind."""
    return {
        "height": height,
        "title": {"text": title, "anchor": "start", "fontSize": 13},
        "datasets": {"main": _records(df)},
        "data": {"name": "main"},
        # Vertical, said outright: with x and x2 (a bucket's start and end) and no y2, Vega-Lite
        # takes a bar for a horizontal range, and each bucket was drawn as a thin line at its count.
        "mark": {"type": "bar", "tooltip": True, "orient": "vertical"},
        "encoding": {
            "x": _x(domain),
            "x2": {"field": "end"},
            # Whole numbers only: Vega's default ticks on a small count are 0, 0.2, 0.4, ... ("0.5
            # incidents").
            "y": {
                "field": "count",
                "type": "quantitative",
                "stack": True,
                "title": "incidents",
                "axis": {"format": "d", "tickMinStep": 1},
            },
            "color": {
                "field": "kind",
                "type": "nominal",
                "title": None,
                "legend": _legend(),
                "scale": {"range": PALETTE},
            },
            "tooltip": [
                {"field": "t", "type": "temporal", "title": "from", "format": TIME_FORMAT},
                {"field": "kind"},
                {"field": "count", "type": "quantitative", "format": "d"},
            ],
        },
    }


def grouped_bars(
    df: pd.DataFrame,
    *,
    x: str,
    value: str,
    group: str,
    title: str,
    unit: str,
    number_format: str = ".2f",
    height: int = 220,
) -> dict[str, Any]:
    """Bars per ``x`` with one bar per ``group`` side by side (e.g. p50/p90/p99 per device group)."""
    return {
        "height": height,
        "title": {"text": title, "anchor": "start", "fontSize": 13},
        "datasets": {"main": _records(df)},
        "data": {"name": "main"},
        "mark": {"type": "bar", "cornerRadiusEnd": 2},
        "encoding": {
            "x": {"field": x, "type": "nominal", "title": None, "sort": None, "axis": {"labelAngle": 0}},
            "xOffset": {"field": group, "type": "nominal", "sort": None},
            "y": {"field": value, "type": "quantitative", "title": unit},
            "color": {
                "field": group,
                "type": "nominal",
                "title": None,
                "sort": None,
                "legend": _legend(),
                "scale": {"range": PALETTE},
            },
            "tooltip": [
                {"field": group},
                {"field": x},
                {"field": value, "type": "quantitative", "format": number_format, "title": unit},
            ],
        },
    }


def bars(
    df: pd.DataFrame,
    *,
    group: str,
    value: str,
    title: str,
    unit: str,
    number_format: str = ".3g",
    height: int = 220,
) -> dict[str, Any]:
    """One bar per group, labelled on the axis (no legend to decode)."""
    return {
        "height": height,
        "title": {"text": title, "anchor": "start", "fontSize": 13},
        "datasets": {"main": _records(df)},
        "data": {"name": "main"},
        "mark": {"type": "bar", "cornerRadiusEnd": 2},
        "encoding": {
            "x": {"field": group, "type": "nominal", "title": None, "sort": None, "axis": {"labelAngle": 0}},
            "y": {"field": value, "type": "quantitative", "title": unit},
            "color": {
                "field": group,
                "type": "nominal",
                "legend": None,
                "sort": None,
                "scale": {"range": PALETTE},
            },
            "tooltip": [
                {"field": group},
                {"field": value, "type": "quantitative", "format": number_format, "title": unit},
            ],
        },
    }


def show(spec: dict[str, Any], *, key: str | None = None) -> None:
    # Fit the width only: Streamlit's default ("fit" both ways) takes the title, the legend and
    # the axis out of the spec's height, so eight GPUs' two legend rows left a plot ~40 px tall.
    spec = {"autosize": {"type": "fit-x", "contains": "padding"}, **spec}
    st.vega_lite_chart(spec=spec, width="stretch", key=key)
