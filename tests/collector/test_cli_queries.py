"""Query commands that say what they did (issue 18), on SQLite and PostgreSQL, with the data put
in through the real pipeline (agent records -> spool -> uplink -> collector over gRPC):

* a device reinstalled with a fresh state directory (same name, new agent id): its name reaches
  the whole history in ``metrics``, ``logs``, ``incidents``, ``latency`` and the query API; its
  agent id one install; ``devices`` shows the earlier install as replaced, the fleet one row;
* an empty result names the filter that emptied it (``devices --label``, ``incidents``, ``logs``,
  ``latency --name``);
* ``scan --db`` imports: the device is "imported" (not offline), its incidents not open;
* ``metrics``: min/mean/max/last per metric with memory's total, ``--raw``, ``--json`` with ISO
  times, ``--csv``; ``--csv`` for every query command; ``logs --follow``; ``compare``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from fleetscope.agent.records import GpuSample, HostSample, IncidentRecord, LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.cli import main as fleetscope
from fleetscope.collector import query
from fleetscope.collector.ingest.scan_import import ImportedIncident, import_incidents
from fleetscope.collector.query.installs import search_logs_all_installs
from fleetscope.collector.query.samples import metrics_summary
from fleetscope.collector.storage.engine import make_engine
from fleetscope.proto import buckets as bucket_math
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.helpers import IdleSampler, make_agent

S = 10**9
GIB = 1 << 30


def _latency(t0: int, base_ms: float) -> pb.SdkReport:
    durations = [base_ms + (i % 5) for i in range(100)]
    hist: dict[int, int] = {}
    for ms in durations:
        i = bucket_math.bucket_index(ms * 1e6)
        hist[i] = hist.get(i, 0) + 1
    return pb.SdkReport(latency=[pb.LatencyHistogram(
        name="infer", start_ns=t0, end_ns=t0 + 10 * S, count=len(durations), sum_ns=int(sum(durations) * 1e6),
        bucket_index=list(hist), bucket_count=list(hist.values()))])


def _send(state_dir: Path, port: int, name: str, records: SampleSet, report: pb.SdkReport | None = None) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    agent = make_agent(state_dir, [f"127.0.0.1:{port}"], IdleSampler(), name=name)
    agent.add(records)
    if report is not None:
        agent.add_sdk_report(report)
    agent.flush()
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), "batches not acknowledged"
    finally:
        agent.uplink.stop()
        agent.spool.close()


def _install(t: int, used_gib: float, note: str, kind: str) -> SampleSet:
    return SampleSet(
        gpu=[GpuSample(ts_ns=t + k * 10 * S, gpu_index=0, util_gpu_percent=10.0 * (k + 1), temp_c=50.0 + k,
                       memory_used_bytes=int((used_gib + k) * GIB), memory_total_bytes=8 * GIB, power_w=10.0)
             for k in range(3)],
        host=[HostSample(ts_ns=t + k * 10 * S, cpu_percent=20.0 + k, mem_total_bytes=16 * GIB,
                         mem_used_bytes=(4 + k) * GIB) for k in range(3)],
        logs=[LogEvent(ts_ns=t + S, source="/var/log/app.log", message=f"{note} install line", level="warning")],
        incidents=[IncidentRecord(ts_ns=t + 2 * S, kind=kind, severity="error", title=f"{kind} on the {note} install")],
    )


@pytest.fixture
def fleet(tmp_path: Path, db_url: str, collector):  # type: ignore[no-untyped-def]
    """drone-7 installed twice (fresh state directory: new agent id), server-1, and an import."""
    t0 = (time.time_ns() - 1800 * S) // S * S
    _send(tmp_path / "first", collector.port, "drone-7", _install(t0, 1.0, "first", "cuda_oom"), _latency(t0, 10.0))
    _send(tmp_path / "second", collector.port, "drone-7", _install(t0 + 600 * S, 4.0, "second", "host_oom"),
          _latency(t0 + 600 * S, 10.0))
    _send(tmp_path / "server", collector.port, "server-1", SampleSet(
        gpu=[GpuSample(ts_ns=t0 + k * S, gpu_index=0, util_gpu_percent=90.0, power_w=300.0, memory_used_bytes=GIB,
                       memory_total_bytes=80 * GIB) for k in range(5)]), _latency(t0, 2.0))
    engine = make_engine(db_url)
    try:
        import_incidents(engine, device="old-server", incidents=[ImportedIncident(
            key="k1", ts_ns=t0, kind="cuda_oom", severity="error", title="an old OOM", facts={}, source="/x.log",
            excerpt="")])
    finally:
        engine.dispose()
    yield t0


def _cli(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> tuple[str, str]:
    capsys.readouterr()
    assert fleetscope(list(args)) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out, err


def _agent_ids(db_url: str) -> list[str]:
    engine = query.open_database(db_url)
    try:
        with Session(engine) as s:
            return [d.agent_id for d in query.list_devices(session=s, now_ns=time.time_ns()) if d.name == "drone-7"]
    finally:
        engine.dispose()


def test_a_name_reaches_every_install_and_an_agent_id_one(fleet, db_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    t0 = fleet
    first, second = sorted(_agent_ids(db_url), key=lambda a: a)  # two installs, one name
    assert first != second
    out, _ = _cli(capsys, "incidents", "--db", db_url, "--device", "drone-7", "--since", "2h")
    assert "first install" in out and "second install" in out
    out, _ = _cli(capsys, "logs", "--db", db_url, "--device", "drone-7", "--since", "2h")
    assert "first install line" in out and "second install line" in out
    doc = json.loads(_cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h", "--json")[0])
    assert len(doc["host"]) == 6 and len(doc["gpu"]) == 6 and sorted(doc["installs"]) == sorted([first, second])
    out, _ = _cli(capsys, "latency", "--db", db_url, "--device", "drone-7", "--since", "2h", "--json")
    assert json.loads(out)["latency"][0]["count"] == 200  # both installs' histograms merged
    # An agent id picks one install.
    for agent_id in (first, second):
        out, _ = _cli(capsys, "incidents", "--db", db_url, "--device", agent_id, "--since", "2h", "--csv")
        assert len(list(csv.reader(io.StringIO(out)))) == 2  # header + that install's incident
    # devices: both rows, the earlier install "replaced" (not OFFLINE), and how to pick one.
    out, _ = _cli(capsys, "devices", "--db", db_url)
    assert "replaced" in out and "2 installs" in out and "--device AGENT_ID" in out
    assert "old-server" in out and "imported" in out.split("old-server", 1)[1].splitlines()[0]
    assert "OFFLINE" not in out
    # The query API the dashboard reads: the fleet shows one drone-7 row, the import not offline.
    engine = query.open_database(db_url)
    try:
        with Session(engine) as s:
            fleet_rows = query.fleet_overview(session=s, now_ns=time.time_ns()).devices
            lines = search_logs_all_installs(session=s, device="drone-7", since_ns=t0 - S, until_ns=time.time_ns())
    finally:
        engine.dispose()
    assert [d.name for d in fleet_rows].count("drone-7") == 1
    (old,) = [d for d in fleet_rows if d.name == "old-server"]
    assert (old.state, old.open_incidents) == ("imported", 0)
    assert [ln.message for ln in lines] == ["first install line", "second install line"]


def test_empty_results_name_the_filter(fleet, db_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    out, _ = _cli(capsys, "devices", "--db", db_url, "--label", "site=nowhere")
    assert out.startswith("no devices: --label site=nowhere matched none") and "values of 'site': test" in out
    out, _ = _cli(capsys, "devices", "--db", db_url, "--label", "site=test", "--label", "site=nowhere")
    assert "drone-7" in out  # two values of one key: either will do
    out, _ = _cli(capsys, "incidents", "--db", db_url, "--device", "server-1", "--since", "2h")
    assert out.startswith("no incidents: --device server-1 matched none")
    out, _ = _cli(capsys, "incidents", "--db", db_url, "--device", "drone-7", "--kind", "gpu_xid", "--since", "2h")
    assert out.startswith("no incidents: --kind gpu_xid matched none among the incidents with --device drone-7")
    out, _ = _cli(capsys, "incidents", "--db", db_url, "--kind", "cuda_oom", "--kind", "host_oom", "--since", "2h")
    assert "first install" in out and "second install" in out  # several kinds combine
    _, err = _cli(capsys, "incidents", "--db", db_url, "--kind", "cuda_oomm", code=2)
    assert "unknown incident kind 'cuda_oomm'" in err and "host_oom" in err
    out, _ = _cli(capsys, "incidents", "--db", db_url, "--open", "--device", "old-server", "--since", "2h")
    assert out.startswith("no incidents: --open matched none")  # imported: stored resolved
    out, _ = _cli(capsys, "logs", "--db", db_url, "--device", "drone-7", "--grep", "nothing like it", "--since", "2h")
    assert out.startswith("no log events: --grep 'nothing like it' matched none")
    out, _ = _cli(capsys, "latency", "--db", db_url, "--device", "drone-7", "--name", "nope", "--since", "2h")
    assert "--name nope matched none" in out and "infer" in out
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "5m")
    assert "no samples from drone-7 in that range: its newest sample is from" in out


def test_metrics_summary_raw_json_and_csv(fleet, db_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h")
    rows = {(line.split()[0] + " " + line.split()[1] if line.startswith("GPU") else line.split()[0],
             line.split()[2 if line.startswith("GPU") else 1]): line for line in out.splitlines()[2:] if line.strip()}
    gpu_mem = rows[("GPU 0", "memory_used_bytes")]
    assert "1.0 GiB" in gpu_mem and "6.0 GiB" in gpu_mem and "8.0 GiB" in gpu_mem  # min, max / last, total
    host_mem = rows[("host", "mem_used_bytes")]
    assert "4.0 GiB" in host_mem and "16.0 GiB" in host_mem
    assert "TIME" not in out  # no rows without --raw
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h", "--raw")
    assert out.count("/var") == 0 and "MEM TOTAL" in out and "host (6 samples)" in out
    doc = json.loads(_cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h", "--json")[0])
    p = doc["host"][0]
    assert p["ts"].endswith("Z") and p["ts"].startswith(time.strftime("%Y-", time.gmtime(p["ts_ns"] / 1e9)))
    summary = {(m["scope"], m["metric"]): m for m in doc["summary"]}
    assert summary[("GPU 0", "memory_used_bytes")]["total"] == 8 * GIB
    assert summary[("host", "cpu_percent")]["min"] == 20.0 and summary[("host", "cpu_percent")]["max"] == 22.0
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h", "--csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert {r["metric"] for r in table} >= {"cpu_percent", "mem_used_bytes", "memory_used_bytes", "util_gpu_percent"}
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-7", "--since", "2h", "--csv", "--raw")
    assert list(csv.reader(io.StringIO(out)))[0] == ["ts_ns", "ts", "scope", "metric", "value"]
    # The summary is computed over every sample in range, whatever --limit.
    engine = query.open_database(db_url)
    try:
        with Session(engine) as s:
            m = metrics_summary(session=s, device="server-1", since_ns=0, until_ns=time.time_ns())
    finally:
        engine.dispose()
    assert m.gpu_samples == 5


@pytest.mark.parametrize("command", [["devices"], ["incidents", "--since", "2h"], ["alerts", "--all"],
                                     ["logs", "--device", "drone-7", "--since", "2h"],
                                     ["latency", "--device", "drone-7", "--since", "2h"],
                                     ["metrics", "--device", "drone-7", "--since", "2h"]])
def test_every_query_command_prints_csv(fleet, db_url: str, capsys, command: list[str]) -> None:  # type: ignore[no-untyped-def]
    out, _ = _cli(capsys, *command, "--db", db_url, "--csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows and all(len(r) == len(rows[0]) for r in rows), out
    _, err = _cli(capsys, *command, "--db", db_url, "--csv", "--json", code=2)
    assert "choose one" in err


def test_compare_side_by_side(fleet, db_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    out, _ = _cli(capsys, "compare", "--db", db_url, "--device", "drone-7", "--device", "server-1", "--since", "2h")
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    for row in ("p50", "p90", "p99", "throughput", "GPU power", "energy/inference"):
        assert row in lines, out
    assert "operation: infer" in out
    doc = json.loads(_cli(capsys, "compare", "--db", db_url, "--device", "drone-7", "--device", "server-1",
                          "--since", "2h", "--operation", "infer", "--json")[0])
    by = {d["device"]: d for d in doc["devices"]}
    assert by["drone-7"]["calls"] == 200 and by["server-1"]["calls"] == 100
    assert by["drone-7"]["p99_ms"] > by["server-1"]["p99_ms"]
    assert by["server-1"]["power_w"] == pytest.approx(300.0)
    _, err = _cli(capsys, "compare", "--db", db_url, "--device", "drone-7", "--device", "nosuch", code=1)
    assert "no device named 'nosuch'" in err
    _, err = _cli(capsys, "compare", "--db", db_url, "--device", "drone-7", "--device", "server-1", "--operation", "x",
                  "--since", "2h", code=1)
    assert "timed: infer" in err


@pytest.mark.processes
def test_logs_follow_prints_new_events_as_they_arrive(tmp_path: Path, sqlite_url: str) -> None:
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=sqlite_url, tokens=frozenset(["test-token"]), grace_s=2.0))
    c.start()
    proc = None
    try:
        now = time.time_ns()
        _send(tmp_path / "a", c.port, "tail-me", SampleSet(logs=[LogEvent(ts_ns=now - S, source="s", message="before")]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "logs", "--db", sqlite_url, "--device", "tail-me",
                                 "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        assert "before" in proc.stdout.readline()
        _send(tmp_path / "a", c.port, "tail-me", SampleSet(logs=[LogEvent(ts_ns=time.time_ns(), source="s", message="after")]))
        assert "after" in proc.stdout.readline()
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        assert "Traceback" not in err
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        c.stop()


def _point(name: str, ts: int, value: float, **labels: str) -> pb.MetricPoint:
    p = pb.MetricPoint(name=name, ts_ns=ts, value=value)
    p.labels.update(labels)
    return p


def test_metrics_shows_the_hardware_readings(tmp_path: Path, db_url: str, collector, capsys) -> None:  # type: ignore[no-untyped-def]
    """``metrics`` shows what nvitop and jtop users look at: per GPU its processes, ECC, PCIe and
    limits; a Jetson's nvpmodel, EMC, engines and rails (in the text and under "hardware" in --json)."""
    from fleetscope.agent.records import ProcessUsage

    t = (time.time_ns() - 300 * S) // S * S
    _send(tmp_path / "srv", collector.port, "server-9", SampleSet(gpu=[GpuSample(
        ts_ns=t, gpu_index=0, util_gpu_percent=80.0, memory_used_bytes=30 * GIB, memory_total_bytes=80 * GIB,
        power_w=250.0, power_limit_w=400.0, fan_percent=41.0, pcie_gen=4, pcie_width=16,
        pcie_rx_bytes_per_s=3.0 * 2**20, pcie_tx_bytes_per_s=1.5 * 2**20, ecc_volatile_corrected=2,
        ecc_aggregate_corrected=17, ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=1, retired_pages=3,
        remapped_rows=1, processes=(ProcessUsage(pid=4242, name="trainer.py", cpu_percent=None, rss_bytes=None,
                                                 gpu_memory_bytes=29 * GIB),))]))
    _send(tmp_path / "jet", collector.port, "drone-9", SampleSet(metrics=[
        _point("jetson.nvpmodel_id", t, 0, mode="MAXN"), _point("jetson.jetson_clocks", t, 1),
        _point("jetson.emc_load_percent", t, 37), _point("jetson.emc_mhz", t, 3199),
        _point("jetson.engine_mhz", t, 704, engine="NVENC"), _point("jetson.engine_mhz", t, 0, engine="NVDEC"),
        _point("jetson.power_mw", t, 9120, rail="VDD_IN"), _point("jetson.power_avg_mw", t, 8800, rail="VDD_IN"),
        _point("jetson.temp_c", t, 51.5, sensor="gpu")],
        host=[HostSample(ts_ns=t, cpu_percent=12.0)]))
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "server-9", "--since", "1h")
    hw = out.split("hardware: GPUs as of", 1)[1]
    gpu0 = next(line for line in hw.splitlines() if line.strip().startswith("0 "))  # the GPU table's row
    for shown in ("30.0 GiB / 80.0 GiB", "250 W / 400 W", "41%", "Gen4 x16", "3.0 MiB/s", "2 / 17", "0 / 1"):
        assert shown in gpu0, (shown, gpu0)
    assert gpu0.split()[-3:] == ["3", "1", "1"]  # retired pages, remapped rows, processes
    assert "4242" in hw and "trainer.py" in hw and "29.0 GiB" in hw
    doc = json.loads(_cli(capsys, "metrics", "--db", db_url, "--device", "server-9", "--since", "1h", "--json")[0])
    (g,) = doc["hardware"]["gpus"]
    assert (g["pcie_gen"], g["ecc_aggregate_corrected"], g["power_limit_w"]) == (4, 17, 400.0)
    assert g["processes"][0]["pid"] == 4242 and g["state_ts"].endswith("Z") and doc["hardware"]["jetson"] is None
    out, _ = _cli(capsys, "metrics", "--db", db_url, "--device", "drone-9", "--since", "1h")
    board = out.split("hardware: Jetson board as of", 1)[1]
    assert "nvpmodel 0 (MAXN) · jetson_clocks on · EMC 37% at 3199 MHz" in board
    assert "NVDEC off" in board and "NVENC 704 MHz" in board and "temperatures: gpu 51.5 C" in board
    (rail,) = [line for line in board.splitlines() if "VDD_IN" in line]
    assert rail.split()[1:] == ["9,120", "mW", "8,800", "mW"]
    doc = json.loads(_cli(capsys, "metrics", "--db", db_url, "--device", "drone-9", "--since", "1h", "--json")[0])
    assert doc["hardware"]["jetson"]["nvpmodel_mode"] == "MAXN" and doc["hardware"]["gpus"] == []


def test_simulate_says_what_incident_every_does(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        fleetscope(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--incident-every DURATION mean time between incidents, per device" in text
    assert "CUDA OOM" in text and "Xid" in text and "Default: none" in text
