"""Self-monitoring, the fleet exposition, health and `fleetscope status`, on a real pipeline:
simulated GPU servers and Jetson drones through real agents into a real collector."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from fleetscope.agent.daemon.metrics import AgentMetricsServer
from fleetscope.agent.tools.simulate import build_fleet
from fleetscope.cli import main as cli_main
from fleetscope.cli.args import listen_address
from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.observability.fleet_exposition import GPU_FIELDS
from fleetscope.collector.query import normalise_url
from fleetscope.collector.storage.chunk_reader import read_samples
from tests.conftest import wait_until
from tests.tcp_proxy import TcpProxy

TOKEN = "test-token"


def scrape(port: int, path: str = "/metrics") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        body = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def health(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


@pytest.fixture
def pipeline(tmp_path: Path, db_url: str):  # type: ignore[no-untyped-def]
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset([TOKEN]),
                                            metrics_listen="127.0.0.1:0", health_probe_interval_s=0.2, detectors=None))
    port = collector.start()
    fleet = build_fleet(collectors=[f"127.0.0.1:{port}"], token=TOKEN, devices=3, state_dir=tmp_path / "fleet",
                        interval_s=0.25, jetson_share=0.34, gpus_per_server=2)
    agent_metrics = AgentMetricsServer(fleet.agents[-1], "127.0.0.1:0").start()  # a server
    fleet.start()
    try:
        yield collector, port, fleet, agent_metrics.port
    finally:
        agent_metrics.stop()
        fleet.stop()
        collector.stop()


def test_self_metrics_move_with_the_pipeline_and_the_fleet_carries_dcgm_names(pipeline, db_url: str) -> None:  # type: ignore[no-untyped-def]
    collector, port, fleet, agent_port = pipeline
    mport = collector.observability.metrics_port
    wait_until(lambda: value(scrape(agent_port), "fleetscope_agent_batches_acknowledged_total") >= 2, timeout_s=30,
               message="the agent's acknowledged batches")
    a1, c1 = scrape(agent_port), scrape(mport)
    wait_until(lambda: value(scrape(mport), "fleetscope_collector_ingest_batches_total", status="stored")
               >= value(c1, "fleetscope_collector_ingest_batches_total", status="stored") + 3, timeout_s=30,
               message="collector stored batches to rise")
    wait_until(lambda: value(scrape(agent_port), "fleetscope_agent_batches_acknowledged_total")
               > value(a1, "fleetscope_agent_batches_acknowledged_total"), timeout_s=30, message="agent acks to rise")
    a2, c2 = scrape(agent_port), scrape(mport)
    assert value(a2, "fleetscope_agent_batches_sent_total") >= value(a2, "fleetscope_agent_batches_acknowledged_total") > 0
    assert value(a2, "fleetscope_agent_batches_rejected_total") == 0
    assert value(a2, "fleetscope_agent_connected") == 1
    assert ("fleetscope_agent_dropped_total", (("class", "samples"),)) in a2
    assert value(c2, "fleetscope_collector_ingest_rows_total") > value(c1, "fleetscope_collector_ingest_rows_total")
    assert value(c2, "fleetscope_collector_group_commit_seconds_count") > 0
    assert value(c2, "fleetscope_collector_streams_open") == 3
    assert value(c2, "fleetscope_collector_database_up") == 1
    assert value(c2, "fleetscope_collector_ingest_batches_total", status="rejected") == 0
    assert "process_cpu_seconds_total" in {k[0] for k in c2}
    # The agents stop (draining their spools); the spool depth returns to 0 and stays there.
    agents = fleet.agents
    fleet.stop()
    assert value(scrape(agent_port), "fleetscope_agent_spool_batches") == 0
    assert all(a.spool.stats().batches == 0 for a in agents)

    time.sleep(1.1)  # past the exposition's one-second cache
    fleet_samples = scrape(mport, "/metrics/fleet")
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            devices = {r.id: r for r in conn.execute(text("SELECT id, name, kind, agent_id FROM devices"))}
            # Every GPU row at its device's newest sample time, wherever the samples are stored.
            got = read_samples(conn, "gpu", sorted(devices), 0, 2**63 - 1)
            newest = {int(d): int(t) for d, t in zip(got.device_id, got.ts_ns)}  # time order: the last is the newest
            rows = [{"device_id": int(got.device_id[i]), "gpu_index": int(got.gpu_index[i]),
                     **{c: got.value(c, i) for c in got.values}}
                    for i in range(len(got)) if int(got.ts_ns[i]) == newest[int(got.device_id[i])]]
    finally:
        engine.dispose()
    assert {devices[r["device_id"]].kind for r in rows} == {"server", "jetson"}
    assert len(rows) == 2 * 2 + 1  # two servers with two GPUs, one drone
    by_name = {f.name: f for f in GPU_FIELDS}
    for r in rows:
        dev = devices[r["device_id"]]
        matches = {k: v for k, v in fleet_samples.items()
                   if k[0] == "DCGM_FI_DEV_GPU_UTIL" and dict(k[1]).get("fleetscope_device") == dev.name
                   and dict(k[1])["gpu"] == str(r["gpu_index"])}
        assert len(matches) == 1, (dev.name, r["gpu_index"])
        (name, labels), util = next(iter(matches.items()))
        lab = dict(labels)
        assert lab["device"] == f"nvidia{r['gpu_index']}" and lab["Hostname"] and lab["modelName"]
        assert lab["UUID"].startswith("GPU-")  # the inventory's (a Jetson without one gets JETSON-<agent id>)
        assert util == pytest.approx(r["util_gpu_percent"])
        for metric, column, scale in (("DCGM_FI_DEV_FB_USED", "memory_used_bytes", 1 / 2**20),
                                      ("DCGM_FI_DEV_GPU_TEMP", "temp_c", 1), ("DCGM_FI_DEV_POWER_USAGE", "power_w", 1),
                                      ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 1000),
                                      ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", 1), ("DCGM_FI_DEV_MEM_CLOCK", "memory_clock_mhz", 1),
                                      ("DCGM_FI_DEV_MEM_COPY_UTIL", "util_memory_percent", 1)):
            assert by_name[metric].column == column
            # prometheus_client's parser names a counter's sample <name>_total, as a scraper would
            sample = metric + "_total" if by_name[metric].type == "counter" else metric
            assert fleet_samples[(sample, labels)] == pytest.approx(r[column] * scale), (dev.name, metric)
        free = fleet_samples[("DCGM_FI_DEV_FB_FREE", labels)]
        total = fleet_samples[("DCGM_FI_DEV_FB_TOTAL", labels)]
        assert free == pytest.approx(total - r["memory_used_bytes"] / 2**20)
    # The simulated devices share this machine's OS hostname, as cloned Jetson images do: the
    # device's name is dcgm-exporter's Hostname, so a dashboard's `avg by (Hostname, gpu,
    # modelName)` keeps one series per GPU; the OS hostname is its own label.
    util = [dict(k[1]) for k in fleet_samples if k[0] == "DCGM_FI_DEV_GPU_UTIL"]
    assert len({lab["os_hostname"] for lab in util}) == 1
    assert all(lab["Hostname"] == lab["fleetscope_device"] for lab in util)
    assert len({(lab["Hostname"], lab["gpu"], lab["modelName"]) for lab in util}) == len(rows) == 5
    for dev in devices.values():  # the fleet stopped cleanly above: stopped, not up (and not an outage)
        up = [v for k, v in fleet_samples.items() if k[0] == "fleetscope_device_up" and dict(k[1])["fleetscope_device"] == dev.name]
        stopped = [v for k, v in fleet_samples.items()
                   if k[0] == "fleetscope_device_stopped" and dict(k[1])["fleetscope_device"] == dev.name]
        assert up == [0] and stopped == [1]
        (labels,) = [dict(k[1]) for k in fleet_samples if k[0] == "fleetscope_device_up" and dict(k[1])["fleetscope_device"] == dev.name]
        assert labels["Hostname"] == dev.name and labels["os_hostname"]
    assert any(k[0] == "fleetscope_host_memory_used_bytes" for k in fleet_samples)
    assert any(k[0] == "fleetscope_device_info" and ("label_fleet", "drones") in k[1] for k in fleet_samples)

    # `fleetscope status`, text and JSON, with the collector's health.
    assert health(port) == health_pb2.HealthCheckResponse.SERVING


def test_status_command_text_and_json(pipeline, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    collector, port, fleet, _ = pipeline
    wait_until(lambda: fleet.acked() >= 6, timeout_s=30, message="batches acknowledged")
    assert cli_main(["status", "--db", db_url, "--collector", f"127.0.0.1:{port}", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["collector"]["health"] == "SERVING"
    assert doc["devices"]["total"] == 3 and doc["devices"]["online"] == 3
    assert doc["ingest"]["rows_per_min"] > 0
    assert doc["database"]["bytes"] > 0
    assert doc["firing_alerts"] == []
    assert cli_main(["status", "--db", db_url, "--collector", f"127.0.0.1:{port}"]) == 0
    out = capsys.readouterr().out
    assert "SERVING" in out and "3 online, 0 offline of 3" in out and "rows/min" in out
    # A collector that is not there: said in one line, exit 1.
    assert cli_main(["status", "--db", db_url, "--collector", "127.0.0.1:1", "--timeout", "0.5"]) == 1
    assert "unreachable" in capsys.readouterr().out


def test_status_without_a_database_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["status", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 1
    out = capsys.readouterr().out
    assert "no database file" in out and "Traceback" not in out


def test_health_is_not_serving_while_postgres_is_unreachable(tmp_path: Path, pg_url: str) -> None:
    host_port = pg_url.split("@", 1)[-1].split("/", 1)[0] if "@" in pg_url else pg_url.split("//", 1)[1].split("/", 1)[0]
    host, _, pport = host_port.rpartition(":")
    proxy = TcpProxy((host or "127.0.0.1", int(pport or 5432))).start()
    url = pg_url.replace(host_port, proxy.address)
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]),
                                            metrics_listen="127.0.0.1:0", health_probe_interval_s=0.2,
                                            detectors=None, rollups=False))
    port = collector.start()
    mport = collector.observability.metrics_port
    try:
        assert health(port) == health_pb2.HealthCheckResponse.SERVING
        assert urllib.request.urlopen(f"http://127.0.0.1:{mport}/readyz", timeout=5).status == 200
        proxy.cut()
        wait_until(lambda: health(port) == health_pb2.HealthCheckResponse.NOT_SERVING, timeout_s=20,
                   message="NOT_SERVING while the database is unreachable")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/readyz", timeout=5)
        assert err.value.code == 503
        err.value.close()  # the error holds the response's socket
        assert urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=5).status == 200  # the process is alive
        assert value(scrape(mport), "fleetscope_collector_database_up") == 0
        proxy.restore()
        wait_until(lambda: health(port) == health_pb2.HealthCheckResponse.SERVING, timeout_s=30, message="SERVING again")
    finally:
        proxy.restore() if proxy._cut else None
        collector.stop()
        proxy.stop()


@pytest.mark.parametrize("text_in, expected", [("127.0.0.1:9464", "127.0.0.1:9464"), (":9464", ":9464"),
                                               ("[::1]:9464", "[::1]:9464"), ("off", None), ("OFF", None)])
def test_metrics_listen_values(text_in: str, expected: str | None) -> None:
    assert listen_address(text_in) == expected


@pytest.mark.parametrize("bad", ["9464x", "host", "::1:9464", "127.0.0.1:99999"])
def test_a_wrong_metrics_address_is_one_line_exit_2(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["agent", "--collector", "127.0.0.1:1", "--metrics-listen", bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not an address" in err and "Traceback" not in err


@pytest.mark.server
def test_job_metrics_survive_a_scrape_config_and_detector_lag_is_small_on_a_gpu_less_device(
        tmp_path: Path, sqlite_url: str) -> None:
    """A self-metric labelled ``job`` becomes ``exported_job`` under Prometheus' scrape config (the
    scrape's own ``job`` wins), so ``{job="rollup"}`` found nothing: the jobs are ``collector_job``.
    And a detector's lag is how long since it last looked at everything: a GPU detector that never
    reads a row of a GPU-less device is not behind on it (its lag read 401.9 s after 1.5 min)."""
    import subprocess
    import sys

    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=sqlite_url, tokens=frozenset([TOKEN]),
                                            metrics_listen="127.0.0.1:0", detectors_interval_s=0.5))
    port = collector.start()
    with open(tmp_path / "agent.log", "ab") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.cli", "agent", "--token", TOKEN, "--name", "no-gpu",
             "--collector", f"127.0.0.1:{port}", "--spool", str(tmp_path / "agent"), "--interval", "250ms",
             "--no-gpu", "--no-kernel-log"], stdout=out, stderr=subprocess.STDOUT)
    try:
        mport = collector.observability.metrics_port

        def lags() -> dict[str, float]:
            return {dict(k[1])["collector_job"]: v for k, v in scrape(mport).items()
                    if k[0] == "fleetscope_collector_job_lag_seconds"}

        wait_until(lambda: {"detector:gpu_throttling", "detector:memory_growth"} <= set(lags()), timeout_s=30,
                   message="the detectors' lag")
        # Several passes, and past the first windows the detectors read on a new device: long
        # enough that a detector not looking at the device would be 10 s behind and more.
        time.sleep(8.0)
        samples = scrape(mport)
        assert not [k for k in samples if {"job", "instance"} & {name for name, _ in k[1]}], \
            "a target's own job/instance labels are renamed exported_* by Prometheus"
        held = {dict(k[1])["collector_job"] for k in samples if k[0] == "fleetscope_collector_job_holds_lease"}
        assert {"rollup", "detectors"} <= held
        # A detector that keeps up trails the newest data by the agent's batch interval, a pass
        # (0.5 s) and the writer's commit: about 2-3 s, over 3 s on a busy machine (CI: 3.02 s).
        for job, lag in lags().items():
            if job.startswith("detector:"):
                assert lag < 5.0, (job, lag)
    finally:
        agent.terminate()
        agent.wait(30)
        collector.stop()
