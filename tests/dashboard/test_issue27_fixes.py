"""Issue 27's dashboard points through Streamlit's AppTest, each asserting what the user sees:

an offline device shows no "now" figures (its last ones are said as such, with their age); a 24 h
range draws a 24 h axis; 1 s data is drawn without breaks where data exists (a late sample, a
bucket of one sample) while a real outage still breaks the line; the incident count axis is whole
numbers; efficiency has the CLI's precision; no fleet column is cut.

The "lone" device sent its samples through a real agent and collector; then it fell silent, which
the test plays by moving its last-seen time six minutes back (no test sleeps six minutes).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from fleetscope.agent.records import GpuSample, HostSample
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.dashboard.conftest import app, chart_data, charts, frame, no_errors, texts
from tests.dashboard.small_fleet import SmallFleet, _latency, _send

S = 10**9
GIB = 1 << 30
TOKEN = "test-token"
NAME = "lone-server"
TWIN = "twin-server"
SILENT_FOR_S = 360  # "six minutes later"
PERIOD_NS = 1_300_000_000  # a sample every 1.3 s: 2 s buckets hold one sample or two
LATE = {30}  # one late sample: an empty 2 s bucket, not an outage
OUTAGE = set(range(60, 80))  # 26 s without samples: a real gap
SAMPLES = 100


@dataclass
class Lone:
    url: str
    last_ns: int  # the last sample


@pytest.fixture(scope="module")
def lone(tmp_path_factory: pytest.TempPathFactory) -> Lone:
    from sqlalchemy import text

    from fleetscope.collector.ingest.server import Collector, CollectorSettings
    from fleetscope.collector.storage.engine import make_engine

    tmp = tmp_path_factory.mktemp("lone")
    url = f"sqlite:///{tmp / 'fleet.db'}"
    now = time.time_ns()
    # On a whole 2 s bucket: the late sample's neighbours (37.7 s and 40.3 s in) leave [38 s, 40 s) empty.
    t0 = (now - SILENT_FOR_S * S - (SAMPLES - 1) * PERIOD_NS) // (2 * S) * (2 * S)
    last_ns = t0 + (SAMPLES - 1) * PERIOD_NS
    ts = [t0 + k * PERIOD_NS for k in range(SAMPLES) if k not in LATE | OUTAGE]
    records = SampleSet(
        gpu=[GpuSample(ts_ns=t, gpu_index=0, util_gpu_percent=87.0, temp_c=71.0, memory_used_bytes=30 * GIB,
                       memory_total_bytes=80 * GIB, power_w=1011.0) for t in ts],
        host=[HostSample(ts_ns=t, cpu_percent=40.0, mem_total_bytes=64 * GIB, mem_used_bytes=20 * GIB,
                         disk_read_bytes=k * 10 * 2**20, disk_write_bytes=k * 2**20,
                         net_rx_bytes=k * 5 * 2**20, net_tx_bytes=k * 2**20) for k, t in enumerate(ts)],
    )
    # Ten SDK reports of 100 inferences each: about 0.03 inferences per joule at 1,011 W over an hour.
    report = pb.SdkReport(latency=[h for k in range(10) for h in _latency(t0 + k * 10 * S, 20.0).latency])
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]), grace_s=2.0))
    collector.start()
    try:
        _send(tmp / "agent", f"127.0.0.1:{collector.port}", NAME, records, report, final=False)  # lost, not stopped
        # A second device: the CLI compares two or more.
        _send(tmp / "twin", f"127.0.0.1:{collector.port}", TWIN, records, report)
    finally:
        collector.stop()
    engine = make_engine(url, create=False)
    with engine.begin() as c:
        c.execute(text("UPDATE devices SET last_seen_ns = :t"), {"t": last_ns})
    engine.dispose()
    return Lone(url, last_ns)


def _spec(at, title: str) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(charts(at)[title].proto.spec)


# ------------------------------------------------------------------------------ offline: no "now"


@pytest.mark.server  # the module's lone device streams into a collector
def test_an_offline_device_shows_no_current_figures(lone: Lone) -> None:
    at = app(lone.url, "device", query={"device": NAME, "range": "1h"}).run()
    no_errors(at)
    assert "offline" in texts(at)
    figures = {m.label: m.value for m in at.metric}
    assert set(figures) >= {"GPU utilisation", "GPU power", "CPU"}
    assert all(v == "–" for v in figures.values()), f"an offline device shows current figures: {figures}"
    # The last readings are still there, said as last known, with their age.
    said = texts(at)
    assert "No current readings (offline). Last known, 6 min ago" in said, said
    assert "GPU utilisation 87 %" in said and "GPU power 1011 W" in said
    # The Fleet page: no figures for it either.
    at = app(lone.url, "fleet").run()
    no_errors(at)
    (row,) = [r for r in frame(at, "fleet_table").to_dict("records") if r["Device"] == NAME]
    assert row["State"] == ["offline"]
    assert (row["GPU util"] is None or row["GPU util"] != row["GPU util"]) and row["Power"] == "–"


# ------------------------------------------------------------------------------ axes and gaps


@pytest.mark.server  # the module's lone device streams into a collector
@pytest.mark.parametrize("preset,span_s", [("24h", 86400), ("6h", 6 * 3600)])
def test_a_range_draws_an_axis_of_its_span(lone: Lone, preset: str, span_s: int) -> None:
    at = app(lone.url, "device", query={"device": NAME, "range": preset}).run()
    no_errors(at)
    x = _spec(at, "GPU utilisation")["layer"][-1]["encoding"]["x"]
    from datetime import datetime

    lo, hi = (datetime.fromisoformat(v).timestamp() for v in x["scale"]["domain"])
    assert hi - lo == pytest.approx(span_s, abs=1), "the axis is the range asked for, not the device's life"
    assert "first data" in texts(at), "the caption says where the data begins"


@pytest.mark.server  # the module's lone device streams into a collector
def test_one_second_data_breaks_only_at_an_outage(lone: Lone) -> None:
    at = app(lone.url, "device", query={"device": NAME, "range": "15m"}).run()
    no_errors(at)
    assert "2 s buckets" in texts(at)
    util = chart_data(at, "GPU utilisation")
    # One break: the 26 s outage; not the late sample's empty bucket.
    assert util["util"].isna().sum() == 1, util[util["util"].isna()]
    at = app(lone.url, "device", query={"device": NAME, "range": "15m", "tab": "Host"}).run()
    for title in ("Disk I/O", "Network"):
        rows = chart_data(at, title)
        breaks = rows[rows["value"].isna()]
        # One break per line (read and write), at the outage: a bucket of one sample has no rate,
        # and is left out rather than drawn as a hole.
        assert len(breaks) == 2 and breaks["t"].nunique() == 1, (title, breaks)
        assert rows["value"].notna().sum() > 20


def test_the_incident_count_axis_is_whole_numbers(small_fleet: SmallFleet) -> None:
    at = app(small_fleet.url, "incidents", query={"range": "1h"}).run()
    no_errors(at)
    (title,) = [t for t in charts(at) if t.startswith("Incidents per")]
    y = _spec(at, title)["encoding"]["y"]
    assert y["axis"]["tickMinStep"] == 1 and y["axis"]["format"] == "d"
    assert all(float(c).is_integer() for c in chart_data(at, title)["count"])


# ------------------------------------------------------------------------------ figures and columns


@pytest.mark.server  # the module's lone device streams into a collector
def test_efficiency_has_the_cli_precision(lone: Lone) -> None:
    cli = subprocess.run(
        [sys.executable, "-m", "fleetscope.cli", "compare", "--db", lone.url, "--device", NAME,
         "--device", TWIN, "--since", "1h", "--json"], capture_output=True, text=True, timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    doc = json.loads(cli.stdout)
    group = next(g for g in doc["devices"] if g["device"] == NAME)
    per_joule = group["inferences_per_joule"]
    assert 0 < per_joule < 0.05, "the case the issue saw: a value one decimal prints as 0.0"
    at = app(lone.url, "compare", query={"range": "1h", "a": f"device: {NAME}"}).run()
    no_errors(at)
    table = frame(at, "Metric").set_index("Metric")
    shown = str(table.loc["Throughput per watt"].iloc[0])
    number = float(re.match(r"[\d.,]+", shown).group(0).replace(",", ""))  # type: ignore[union-attr]
    assert number == pytest.approx(per_joule, rel=0.02), (shown, per_joule)
    assert f"{number:.2f}" == f"{per_joule:.2f}", "the CLI's two decimals agree"


def _px(text: str, *, header: bool = False) -> int:
    """At least what a cell's text takes in the grid's font (~7 px a character on the screenshots),
    plus padding; a header also has its sort and menu marks."""
    return 7 * len(text) + (30 if header else 16)


def test_no_fleet_column_is_cut(small_fleet: SmallFleet) -> None:
    at = app(small_fleet.url, "fleet").run()
    no_errors(at)
    (table,) = [d for d in at.dataframe if d.key == "fleet_table"]
    widths = {k: v.get("width", 0) for k, v in json.loads(table.proto.columns).items()}
    df = table.value
    assert any("Orin NX Engineering" in str(k) for k in df["Kind"]), "the long Jetson name is in the table"
    for column in df.columns:
        assert widths.get(column, 0) >= _px(column, header=True), f"header {column!r} cut at {widths[column]} px"
        for value in df[column]:
            if isinstance(value, str):
                assert widths[column] >= _px(value), f"{column}: {value!r} cut at {widths[column]} px"
