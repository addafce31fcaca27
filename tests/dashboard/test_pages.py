"""Every page through Streamlit's AppTest, on a database filled by a real pipeline run.

The checks are what an operator would look at: which devices are listed and in what state,
what a chart plots (compared with the samples the CLI's query returns), what a filter leaves,
what an incident's detail says.
"""

from __future__ import annotations

import time
from statistics import mean

import pytest
from sqlalchemy.orm import Session

from fleetscope.collector.query import device_metrics, search_incidents
from fleetscope.collector.storage.engine import make_engine
from fleetscope.proto import buckets as bucket_math
from tests.dashboard.conftest import app, chart_data, charts, frame, no_errors, texts
from tests.dashboard.pipeline import Pipeline

NS = 10**9


def _incident(pipeline: Pipeline, kind: str):  # type: ignore[no-untyped-def]
    engine = make_engine(pipeline.url, create=False)
    try:
        with Session(engine) as s:
            found = search_incidents(session=s, since_ns=0, until_ns=time.time_ns() + NS, kinds=[kind])
    finally:
        engine.dispose()
    assert found, f"the pipeline stored no {kind} incident"
    return found[0]


# ------------------------------------------------------------------------------ fleet


def test_fleet_lists_every_device_with_state_kind_and_sparklines(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "fleet").run()
    no_errors(at)
    table = frame(at, "fleet_table")
    assert sorted(table["Device"]) == sorted(pipeline.all_devices)
    # Offline first (the default sort), flagged, and named in the notice above the table.
    assert table.iloc[0]["Device"] == pipeline.lost and list(table.iloc[0]["State"]) == ["offline"]
    assert all(list(s) == ["online"] for s in table.iloc[1:]["State"])
    assert f"1 device offline: **{pipeline.lost}**" in texts(at)
    rows = table.set_index("Device")
    assert (
        rows.loc[pipeline.drones[0], "Kind"] == "Jetson Orin NX Engineering Reference"
        and rows.loc[pipeline.drones[0], "GPUs"] == 1
    )
    assert (
        rows.loc[pipeline.servers[0], "Kind"] == "2× A100-SXM4-80GB"
        and rows.loc[pipeline.servers[0], "GPUs"] == 2
    )
    assert rows.loc[pipeline.servers[0], "GPU memory"].endswith("/ 160.0 GiB")
    assert rows.loc[pipeline.hot, "Temp"] == "88 °C"
    for name in (*pipeline.drones, *pipeline.servers):
        assert len(rows.loc[name, "Util 30 min"]) >= 1, f"{name} has no utilisation sparkline"
        assert 0 <= rows.loc[name, "GPU util"] <= 100
    assert "fleet=drones" in list(rows.loc[pipeline.drones[0], "Labels"])
    # Open incidents per device, worst severity shown, and listed under the alerts.
    assert list(rows.loc[pipeline.servers[1], "Incidents 24 h"]) == ["1 critical"]
    incidents = frame(at, "fleet_incidents")
    assert {"gpu_xid", "cuda_oom", "host_oom"} <= set(incidents["Kind"])
    assert "trt_benchmark" not in set(incidents["Kind"]), "benchmark records are not open incidents"
    metrics = {m.label: (m.value, m.delta) for m in at.metric}
    assert metrics["Online"] == (f"{len(pipeline.all_devices) - 1:,}", f"of {len(pipeline.all_devices):,}")
    assert metrics["Offline"][0] == "1"


def test_fleet_filters_narrow_the_table_and_survive_a_refresh(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "fleet").run()
    at.multiselect(key="keep_fleet_labels").set_value(["fleet=drones"]).run()
    no_errors(at)
    names = set(frame(at, "fleet_table")["Device"])
    assert names == {*pipeline.drones, pipeline.lost, pipeline.hot}
    at.selectbox(key="keep_fleet_state").set_value("Offline").run()
    assert list(frame(at, "fleet_table")["Device"]) == [pipeline.lost]
    at.run()  # what the timed refresh does: the filters stay
    assert list(frame(at, "fleet_table")["Device"]) == [pipeline.lost]
    at.selectbox(key="keep_fleet_state").set_value("All").run()
    at.multiselect(key="keep_fleet_labels").set_value([]).run()
    at.text_input(key="keep_fleet_search").input("h100").run()
    assert list(frame(at, "fleet_table")["Device"]) == [pipeline.servers[1]]
    at.text_input(key="keep_fleet_search").input("").run()
    at.multiselect(key="keep_fleet_kinds").set_value(["server"]).run()
    assert sorted(frame(at, "fleet_table")["Device"]) == sorted(pipeline.servers)
    at.selectbox(key="keep_fleet_sort").set_value("Temperature").run()
    assert frame(at, "fleet_table").iloc[0]["Device"] in pipeline.servers
    at.text_input(key="keep_fleet_search").input("no-such-device").run()
    assert "No device matches these filters." in texts(at)


def test_fleet_row_opens_the_device_page(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "fleet").run()
    table = frame(at, "fleet_table")
    row = list(table["Device"]).index(pipeline.servers[2])
    at.session_state["fleet_table"] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    no_errors(at)
    assert at.title[0].value == pipeline.servers[2]
    assert at.query_params["device"] == pipeline.servers[2]


# ------------------------------------------------------------------------------ device


def _raw_means(
    pipeline: Pipeline, device: str, since: int, until: int, step_s: int, gpu: int, column: str
) -> dict[float, float]:
    """What the CLI's query returns, averaged per bucket: the reference a chart must match."""
    engine = make_engine(pipeline.url, create=False)
    try:
        with Session(engine) as s:
            m = device_metrics(session=s, device=device, since_ns=since, until_ns=until)
    finally:
        engine.dispose()
    buckets: dict[float, list[float]] = {}
    step = step_s * NS
    for p in m.gpu:
        if p.gpu_index == gpu and p.values[column] is not None:
            buckets.setdefault(float((p.ts_ns - p.ts_ns % step) // 10**6), []).append(p.values[column])
    return {t: mean(v) for t, v in buckets.items()}


@pytest.mark.parametrize(
    # A 2-GPU server over 24 h: 2 lines share a chart's 1,500 points, so 2 min buckets of minute rollups.
    "range_key, step_s, source", [("15m", 2, "raw samples"), ("24h", 120, "minute rollups")]
)
def test_device_chart_plots_the_stored_samples(
    pipeline: Pipeline, range_key: str, step_s: int, source: str
) -> None:
    device = pipeline.servers[0]
    at = app(pipeline.url, "device", query={"device": device, "range": range_key}).run()
    no_errors(at)
    assert at.title[0].value == device
    size = f"{step_s // 60} min" if step_s >= 60 else f"{step_s} s"
    assert f"{size} buckets" in texts(at)
    assert source in texts(at), "the caption says where the points come from"
    util = chart_data(at, "GPU utilisation").dropna(subset=["util"])
    assert set(util["series"]) == {"GPU 0", "GPU 1"}
    shown = dict(zip(util[util["series"] == "GPU 1"]["t"], util[util["series"] == "GPU 1"]["util"]))
    ts = sorted(shown)
    # Every bucket holding stored samples, from the first up to the newest shown. (The pipeline's
    # minute of data can fall inside one 2 min bucket, depending on the clock: no count is assumed.)
    expected = _raw_means(
        pipeline, device, int(ts[0] * 10**6) - 86_400 * NS, int(ts[-1] * 10**6) + step_s * NS, step_s, 1, "util_gpu_percent"
    )
    assert ts == sorted(expected), "one point per bucket with data, none missing, none invented"
    # The newest bucket may still be filling; every other one must equal the raw mean.
    for t in ts[:-1]:
        assert shown[t] == pytest.approx(expected[t], abs=1e-6), f"bucket {t}"
    assert set(charts(at)) == {
        "GPU utilisation",
        "GPU memory used",
        "GPU temperature",
        "GPU power",
        "SM clock (shaded: throttled)",
    }, "only the open tab is drawn"
    at = app(pipeline.url, "device", query={"device": device, "range": range_key, "tab": "Host"}).run()
    no_errors(at)
    assert set(charts(at)) == {"CPU", "RAM and swap", "Disk I/O", "Network"}
    disk = chart_data(at, "Disk I/O").dropna(subset=["value"])
    assert set(disk["series"]) == {"read", "write"} and (disk["value"] >= 0).all() and disk["value"].max() > 0


def test_device_page_shades_throttling_and_marks_incidents(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "device", query={"device": pipeline.hot, "range": "15m"}).run()
    no_errors(at)
    bands = chart_data(at, "SM clock (shaded: throttled)", "bands")
    assert bands is not None and set(bands["reason"]) == {"thermal"}
    assert (bands["end"] - bands["start"]).sum() >= 30_000, "the hot drone throttled the whole time"
    assert "Throttled for about" in texts(at)
    at = app(pipeline.url, "device", query={"device": pipeline.servers[0], "range": "15m"}).run()
    markers = chart_data(at, "GPU utilisation", "markers")
    assert markers is not None and "cuda_oom" in set(markers["kind"])
    assert "trt_benchmark" not in set(markers["kind"])
    assert chart_data(at, "GPU temperature", "bands") is None, "no throttling on a cool server"
    at = app(
        pipeline.url, "device", query={"device": pipeline.servers[0], "range": "15m", "tab": "Incidents"}
    ).run()
    strip = chart_data(at, "Incidents and alerts", "markers")  # the OOM's alert is shaded on the strip
    assert set(strip["kind"]) == {"cuda_oom"}, "the incident strip, on the range's time axis"
    assert {"cuda_oom", "trt_benchmark"} <= set(frame(at, "device_incidents")["Kind"])


def test_device_latency_percentiles_match_the_recorded_durations(pipeline: Pipeline) -> None:
    device = pipeline.drones[0]
    recorded = sorted(pipeline.latency_ms[device])
    at = app(pipeline.url, "device", query={"device": device, "range": "1h", "tab": "Latency"}).run()
    no_errors(at)
    summary = frame(at, "Operation")
    row = summary.set_index("Operation").loc["infer"]
    assert row["Count"] == len(recorded) and row["Labels"] == "model=yolov8n"
    lat = chart_data(at, "infer model=yolov8n: latency")
    p99 = lat[lat["series"] == "p99"]["value"].dropna()
    # Histograms are merged exactly, then read with the bucket scheme's bounded relative error.
    true_p99 = recorded[round(0.99 * (len(recorded) - 1))]
    assert max(p99) == pytest.approx(true_p99, rel=2 * bucket_math.RELATIVE_ERROR + 0.02)


def test_device_logs_filter_by_level_and_text(pipeline: Pipeline) -> None:
    device = pipeline.servers[1]
    at = app(pipeline.url, "device", query={"device": device, "range": "1h", "tab": "Logs"}).run()
    logs = frame(at, "Message")
    assert {"info", "critical"} <= set(logs["Level"])
    at.selectbox(key="keep_device_log_level").set_value("error").run()
    logs = frame(at, "Message")
    assert set(logs["Level"]) == {"critical"} and "Xid (PCI:0000:3b:00): 79" in logs.iloc[0]["Message"]
    at.selectbox(key="keep_device_log_level").set_value("all").run()
    at.text_input(key="keep_device_log_search").input("loss").run()
    logs = frame(at, "Message")
    assert len(logs) > 0 and all("loss" in m for m in logs["Message"])
    at.text_input(key="keep_device_log_search").input("nothing like this").run()
    assert "No log lines match." in texts(at)


# ------------------------------------------------------------------------------ compare


def test_compare_jetson_against_the_server(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "compare").run()
    no_errors(at)
    # By default: the Jetson model against the first server GPU.
    assert at.multiselect(key="keep_cmp_group_0").value == ["model: Jetson Orin NX Engineering Reference Developer Kit"]
    assert at.multiselect(key="keep_cmp_group_1").value == ["GPU: NVIDIA A100-SXM4-80GB"]
    assert at.selectbox(key="keep_cmp_op").value == "infer"
    table = frame(at, "Metric").set_index("Metric")
    a, b = table.columns
    assert a.startswith("A · Jetson Orin NX") and b.startswith("B · NVIDIA A100")
    drone = sorted(pipeline.latency_ms[pipeline.drones[0]])
    server = sorted(pipeline.latency_ms[pipeline.servers[0]])
    assert (
        table.loc["Inferences timed", a] == f"{len(drone):,}"
        and table.loc["Inferences timed", b] == f"{len(server):,}"
    )

    def ms(text: str) -> float:
        return float(text.removesuffix(" ms"))

    p50 = drone[round(0.5 * (len(drone) - 1))], server[round(0.5 * (len(server) - 1))]
    assert ms(table.loc["Latency p50", a]) == pytest.approx(p50[0], rel=0.03)
    assert ms(table.loc["Latency p50", b]) == pytest.approx(p50[1], rel=0.03)
    assert table.loc["Devices", a] == "5" and table.loc["GPUs", b] == "2"
    for metric in (
        "Throughput (all devices)",
        "Throughput per watt",
        "Energy per inference",
        "GPU power per GPU",
    ):
        assert table.loc[metric, a] != "–" and table.loc[metric, b] != "–", metric
    bars = chart_data(at, "Latency percentiles (merged histograms)")
    assert set(bars["group"]) == {"A", "B"} and set(bars["what"]) == {"p50", "p90", "p99"}
    at.segmented_control(key="keep_cmp_norm").set_value("Per watt").run()
    assert "Throughput per watt" in charts(at)
    bench = frame(at, "GPU compute mean")
    assert sorted(bench["Throughput"]) == ["1,250 qps", "41.5 qps"]
    assert set(bench["Group"]) == {"A", "B"}


def test_compare_label_groups(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "compare").run()
    at.multiselect(key="keep_cmp_group_0").set_value(["label: site=lab"]).run()
    at.multiselect(key="keep_cmp_group_1").set_value(["label: fleet=training"]).run()
    no_errors(at)
    table = frame(at, "Metric").set_index("Metric")
    a, b = table.columns
    assert "site=lab" in a and "fleet=training" in b
    assert table.loc["Devices", b] == str(len(pipeline.servers))
    at.multiselect(key="keep_cmp_group_0").set_value([]).run()
    at.multiselect(key="keep_cmp_group_1").set_value([]).run()
    assert "Pick what to compare" in texts(at)


# ------------------------------------------------------------------------------ incidents


def test_incidents_filter_count_chart_and_detail(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "incidents").run()
    no_errors(at)
    table = frame(at, "inc_table")
    assert {"cuda_oom", "host_oom", "gpu_xid", "trt_benchmark"} <= set(table["Kind"])
    counts = chart_data(at, [t for t in charts(at) if t.startswith("Incidents per")][0])
    assert counts["count"].sum() == len(table)
    at.multiselect(key="inc_kinds").set_value(["cuda_oom"]).run()
    table = frame(at, "inc_table")
    assert set(table["Kind"]) == {"cuda_oom"} and list(table["Device"]) == [pipeline.servers[0]]
    assert at.query_params["kind"] == "cuda_oom", "the filter is in the URL"
    at.session_state["inc_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    no_errors(at)
    oom = _incident(pipeline, "cuda_oom")
    assert at.query_params["incident"] == str(oom.id)
    facts = frame(at, "Key").set_index("Key")
    assert facts.loc["requested_bytes", "Value"] == "2.00 GiB"
    assert facts.loc["reserved_unallocated_bytes", "Value"] == "1.37 GiB"
    assert facts.loc["batch_size", "Value"] == "32"
    page = texts(at)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in page
    assert "Reduce the batch size (it was 32)" in page
    context = chart_data(at, "GPU utilisation")
    assert len(context) > 30, "the samples a minute either side of the OOM"
    assert (
        context["t"].min() >= (oom.ts_ns - 61 * NS) / 1e6
        and context["t"].max() <= (oom.ts_ns + 61 * NS) / 1e6
    )
    marks = chart_data(at, "GPU utilisation", "markers")
    assert oom.ts_ns // 10**6 in set(marks["t"].astype("int64"))


def test_incident_opens_from_a_shared_link(pipeline: Pipeline) -> None:
    xid = _incident(pipeline, "gpu_xid")
    at = app(pipeline.url, "incidents", query={"incident": str(xid.id)}).run()
    no_errors(at)
    page = texts(at)
    assert xid.title in page
    assert "Xid 79" in page and ("reboot" in page.lower() or "reset the gpu" in page.lower())
    logs = frame(at, "Message")
    assert any("Xid (PCI:0000:3b:00): 79" in m for m in logs["Message"]), "the line the incident came from"
    at = app(pipeline.url, "incidents", query={"incident": "999999"}).run()
    assert "There is no incident #999999" in texts(at)


def test_incidents_label_and_device_filters(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "incidents").run()
    at.multiselect(key="inc_labels").set_value(["fleet=drones"]).run()
    # The drones' incidents: the SDK's host OOM, and what the detectors derive (offline, throttling).
    drones = set(frame(at, "inc_table")["Device"])
    assert pipeline.drones[0] in drones and drones <= {*pipeline.drones, pipeline.lost, pipeline.hot}
    at.multiselect(key="inc_labels").set_value([]).run()
    at.multiselect(key="inc_devices").set_value([pipeline.servers[1]]).run()
    assert list(frame(at, "inc_table")["Kind"]) == ["gpu_xid"]
    at.multiselect(key="inc_sev").set_value(["info"]).run()
    assert "No incidents match these filters" in texts(at)
