"""Issue 18's dashboard points through Streamlit's AppTest, each asserting what the user sees:

a reflashed drone's name shows its whole history (charts, incidents, logs); an unknown device in
a link says so instead of showing another; an imported device is "imported", not offline, and
its imported OOM not open; eight GPUs get a picker kept in the URL; a young device's chart keeps
the range's axis (issue 27); the week's incident chart spans whole days; the Labels and Message columns
are wide enough; time axes never repeat a label; the Hardware tab shows processes, ECC, PCIe and
limits, and a Jetson's engines and rails; the Compare page's selection is in the URL.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from fleetscope.dashboard import charts as chart_specs
from tests.dashboard.conftest import app, chart_data, charts, frame, no_errors, texts
from tests.dashboard.small_fleet import LONG_MESSAGE, SmallFleet

S = 10**9
GIB = 1 << 30


def _spec(at, title: str) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(charts(at)[title].proto.spec)


def _domain_ms(spec: dict) -> tuple[float, float]:
    x = spec["encoding"]["x"] if "encoding" in spec else spec["layer"][-1]["encoding"]["x"]
    lo, hi = (datetime.fromisoformat(v).timestamp() * 1000 for v in x["scale"]["domain"])
    return lo, hi


# ------------------------------------------------------------------------------ a reinstalled device


def test_a_reinstalled_drone_shows_its_whole_history(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.drone, "range": "15m"}).run()
    no_errors(at)
    assert at.selectbox(key="device_pick").options.count(f.drone) == 1, "one entry per name"
    assert "Reinstalled: 2 installs of this name" in texts(at)
    mem = chart_data(at, "GPU memory used")
    first = mem[mem["t"] < (f.second_ns // 10**6 - 1000)]
    second = mem[mem["t"] >= (f.second_ns // 10**6 - 1000)]
    # Each install's three samples: 1, 2, 3 GiB before the reflash, 4, 5, 6 GiB after it.
    assert sorted(round(v) for v in first["mem_gib"].dropna()) == [1, 2, 3]
    assert sorted(round(v) for v in second["mem_gib"].dropna()) == [4, 5, 6]
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Logs"}).run()
    logs = frame(at, "Message")
    assert list(logs["Message"]) == [LONG_MESSAGE, "first install line"]  # newest first, both installs
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Incidents"}).run()
    titles = set(frame(at, "device_incidents")["Title"])
    assert titles == {"cuda_oom on the first install", "host_oom on the second install"}
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Latency"}).run()
    (row,) = frame(at, "Worst p99").to_dict("records")
    assert row["Count"] == 200, "both installs' histograms"


def test_an_agent_id_opens_its_device_and_an_unknown_name_says_so(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.first_agent, "range": "15m"}).run()
    no_errors(at)
    assert at.selectbox(key="device_pick").value == f.drone
    at = app(f.url, "device", query={"device": "nosuch", "range": "15m"}).run()
    no_errors(at)
    (warning,) = [w.value for w in at.warning]
    shown = at.selectbox(key="device_pick").value
    assert "No device named **nosuch**" in warning and f"Showing **{shown}** instead" in warning
    assert f.drone in warning, "the known names are listed"


# ------------------------------------------------------------------------------ an imported device


def test_an_imported_device_is_imported_not_offline(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "fleet").run()
    no_errors(at)
    rows = frame(at, "fleet_table").set_index("Device")
    assert list(rows.loc[f.imported, "State"]) == ["imported"]
    assert list(rows.loc[f.imported, "Incidents 24 h"]) == [], "its imported OOM is not open"
    assert list(rows.index).count(f.drone) == 1, "a reinstalled device is one row"
    assert f.imported not in " ".join(str(e.value) for e in at.error), "not in the offline notice"
    assert {m.label: m.value for m in at.metric}["Offline"] == "0"
    at.selectbox(key="keep_fleet_state").set_value("Imported").run()
    assert list(frame(at, "fleet_table")["Device"]) == [f.imported]
    at.selectbox(key="keep_fleet_state").set_value("Offline").run()
    assert "No device matches these filters." in texts(at)
    at = app(f.url, "device", query={"device": f.imported, "range": "24h"}).run()
    assert "imported" in texts(at) and "offline" not in texts(at)


# ------------------------------------------------------------------------------ many GPUs, young devices


def test_eight_gpus_get_a_picker_kept_in_the_url(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.server, "range": "15m"}).run()
    no_errors(at)
    picker = at.pills(key="gpu_pick")
    assert list(picker.options) == [f"GPU {i}" for i in range(8)] and len(picker.value) == 8
    assert set(chart_data(at, "GPU utilisation")["series"]) == {f"GPU {i}" for i in range(8)}
    spec = _spec(at, "GPU utilisation")
    lines = next(layer for layer in spec.get("layer", [spec]) if "color" in layer.get("encoding", {}))
    assert lines["encoding"]["color"]["legend"]["columns"] == 4, "the legend wraps: all eight GPUs show"
    picker.set_value(["GPU 0", "GPU 3"]).run()
    assert set(chart_data(at, "GPU utilisation")["series"]) == {"GPU 0", "GPU 3"}
    assert at.query_params["gpus"] == "0,3"
    at = app(f.url, "device", query={"device": f.server, "range": "15m", "gpus": "5"}).run()
    assert set(chart_data(at, "GPU temperature")["series"]) == {"GPU 5"}


def test_a_young_device_keeps_the_range_axis(small_fleet: SmallFleet) -> None:
    # Issue 18 started a young device's chart at its first data; issue 27 found a "last 24 hours"
    # drawn as 14 minutes misleading: the axis is the range, and the caption says where data begins.
    f = small_fleet
    for device in (f.server, f.drone):
        at = app(f.url, "device", query={"device": device, "range": "24h"}).run()
        lo, hi = _domain_ms(_spec(at, "GPU utilisation"))
        first = chart_data(at, "GPU utilisation")["t"].min()
        assert hi - lo == 86400 * 1000 and lo < first, device
        assert "first data" in texts(at), device


# ------------------------------------------------------------------------------ axes and columns


def test_the_week_chart_spans_whole_buckets(small_fleet: SmallFleet) -> None:
    at = app(small_fleet.url, "incidents", query={"range": "7d"}).run()
    no_errors(at)
    (title,) = [t for t in charts(at) if t.startswith("Incidents per")]
    spec, bars = _spec(at, title), chart_data(at, title)
    step = int((bars["end"] - bars["t"]).iloc[0])
    lo, hi = _domain_ms(spec)
    assert lo % step == 0 and hi % step == 0 and 7 * 86400 * 1000 <= hi - lo <= 7 * 86400 * 1000 + step
    # The current bucket's bar is as wide as the others and inside the axis, not a sliver cut at "now".
    newest = bars["t"].max()
    assert newest + step <= hi, (newest, hi)
    # Bars standing on the axis, stacked by kind: not horizontal ranges drawn as thin lines.
    assert spec["mark"]["orient"] == "vertical" and spec["encoding"]["y"]["stack"] is True


def test_labels_and_messages_are_not_cut(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "fleet").run()
    (table,) = [d for d in at.dataframe if d.key == "fleet_table"]
    widths = json.loads(table.proto.columns)
    widest = max(sum(7 * len(label) + 22 for label in labels) for labels in table.value["Labels"])
    assert widths["Labels"]["width"] >= widest
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Logs"}).run()
    (logs,) = [d for d in at.dataframe if "Message" in d.value.columns]
    assert json.loads(logs.proto.columns)["Message"]["width"] >= 7 * len(LONG_MESSAGE)


def _d3_ticks(lo_ms: float, hi_ms: float, count: int) -> list[float]:
    """The tick times d3 (under Vega) picks for a time scale asked for ``count`` ticks (UTC)."""
    sec, minute, hour, day = 1000, 60_000, 3_600_000, 86_400_000
    steps = [sec, 5 * sec, 15 * sec, 30 * sec, minute, 5 * minute, 15 * minute, 30 * minute,
             hour, 3 * hour, 6 * hour, 12 * hour, day, 2 * day, 7 * day]
    target = (hi_ms - lo_ms) / count
    i = next((k for k, s in enumerate(steps) if s > target), len(steps) - 1)
    step = steps[i - 1] if i and target / steps[i - 1] < steps[i] / target else steps[i]
    first = -(-lo_ms // step) * step
    return [first + k * step for k in range(int((hi_ms - first) // step) + 1)]


@pytest.mark.parametrize("span_s", [90, 300, 599, 700, 900, 1500, 3600, 4 * 3600, 6 * 3600, 86400, 7 * 86400])
def test_time_axes_never_repeat_a_label(span_s: int) -> None:
    hi = 1_796_000_000_000
    domain = (hi - span_s * 1000, hi)
    axis = chart_specs._x(domain)["axis"]
    # Without tickCount Vega asks for one tick per 40 px of a ~700 px chart: 30 s ticks under an
    # "%H:%M" label (a 12-minute young device) printed each minute twice.
    ticks = _d3_ticks(*domain, axis.get("tickCount", 700 // 40))
    fmt = axis["format"]
    labels = [datetime.fromtimestamp(t / 1000, tz=timezone.utc).strftime(fmt) for t in ticks]
    assert len(labels) == len(set(labels)), labels


def test_the_incident_strip_has_a_row_per_kind(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Incidents"}).run()
    spec = _spec(at, "Incidents")
    assert set(chart_data(at, "Incidents", "markers")["kind"]) == {"cuda_oom", "host_oom"}
    # A height in steps per kind: a height in pixels is dropped when the chart stretches to the
    # page's width, and the two kinds were drawn on one row, their names over each other.
    assert spec["height"] == {"step": 28}
    points = spec["layer"][-1]["encoding"]
    # The 15 minutes asked for (issue 27: the axis is the range, not the device's few minutes).
    assert points["y"]["field"] == "kind" and points["x"]["axis"]["format"] == "%H:%M"


def test_the_latency_chart_axis_has_few_ticks(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.drone, "range": "15m", "tab": "Latency"}).run()
    spec = _spec(at, "infer: latency")
    axis = spec["layer"][-1]["encoding"]["x"]["axis"] if "layer" in spec else spec["encoding"]["x"]["axis"]
    assert axis["tickCount"] <= 8 and axis["format"]


# ------------------------------------------------------------------------------ the Hardware tab


def test_hardware_tab_shows_processes_ecc_pcie_and_limits(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "device", query={"device": f.server, "range": "15m", "tab": "Hardware"}).run()
    no_errors(at)
    gpus = frame(at, "PCIe link")
    assert list(gpus["GPU"]) == list(range(8))
    assert all(link.startswith("Gen") for link in gpus["PCIe link"])
    assert all(" / " in p and p != "– / –" for p in gpus["Power / limit"])
    assert all(e[0].isdigit() for e in gpus["ECC corrected (volatile / total)"])
    procs = frame(at, "Process")
    assert len(procs) >= 1 and all(procs["PID"] > 0) and all(m.endswith("iB") for m in procs["GPU memory"])
    at = app(f.url, "device", query={"device": f.jetson, "range": "15m", "tab": "Hardware"}).run()
    no_errors(at)
    assert {"NVENC", "NVDEC", "VIC"} <= set(frame(at, "Engine")["Engine"])
    assert "VDD_IN" in set(frame(at, "Rail")["Rail"])
    assert {m.label for m in at.metric} >= {"nvpmodel", "EMC load", "jetson_clocks"}


# ------------------------------------------------------------------------------ compare in the URL


def test_compare_selection_is_in_the_url(small_fleet: SmallFleet) -> None:
    f = small_fleet
    at = app(f.url, "compare", query={"range": "1h"}).run()
    no_errors(at)
    at.multiselect(key="keep_cmp_group_0").set_value([f"device: {f.drone}"]).run()
    at.multiselect(key="keep_cmp_group_1").set_value([f"device: {f.server}", f"device: {f.jetson}"]).run()
    at.segmented_control(key="keep_cmp_norm").set_value("Per watt").run()
    assert at.query_params["a"] == f"device: {f.drone}"
    assert list(at.query_params["b"]) == [f"device: {f.server}", f"device: {f.jetson}"]
    assert at.query_params["op"] == "infer" and at.query_params["view"] == "Per watt"
    link = dict(at.query_params)
    # The copied link, opened in a fresh session, shows the same comparison.
    at = app(f.url, "compare", query=link).run()
    no_errors(at)
    assert at.multiselect(key="keep_cmp_group_0").value == [f"device: {f.drone}"]
    assert at.multiselect(key="keep_cmp_group_1").value == [f"device: {f.server}", f"device: {f.jetson}"]
    assert at.selectbox(key="keep_cmp_op").value == "infer"
    assert at.segmented_control(key="keep_cmp_norm").value == "Per watt"
    columns = list(frame(at, "Metric").columns)
    assert columns[1] == f"A · {f.drone}" and columns[2].startswith(f"B · {f.server}")
    # A third group from a link opens three pickers; a name no longer in the fleet is said, not kept.
    at = app(f.url, "compare", query={"a": f"device: {f.drone}", "c": ["device: gone", f"device: {f.server}"]}).run()
    assert at.selectbox(key="keep_cmp_n").value == 3
    assert at.multiselect(key="keep_cmp_group_2").value == [f"device: {f.server}"]
    assert "device: gone" in " ".join(str(w.value) for w in at.warning)

