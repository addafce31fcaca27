"""What a device reads "now" (the Fleet page, ``latest_readings`` and ``/metrics/fleet``, metric
alert rules) comes from the latest tables (``gpu_latest``, ``host_latest``, revision 0011):

* a device whose samples were only ever stored as chunks (what the writer stores since 0011)
  shows at once everywhere;
* a replayed older batch never hides a newer reading;
* rows written the old way (the tail tables), carried into the latest tables by migration 0011,
  read exactly as they did from the tail: every GPU at the device's newest time (a GPU that
  stopped reporting is not "now"), the newest reading within the Fleet page's window (a device
  whose clock runs ahead of "now" included), and for an alert the newest sample within the
  lookback that has a value (a reading missed once does not resolve it).

Real SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from fleetscope.collector.alerting.engine import AlertJob
from fleetscope.collector.alerting.rules import parse_rules
from fleetscope.collector.observability.fleet_exposition import FleetExposition
from fleetscope.collector.query import fleet_overview, latest_readings
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import (
    Device,
    alerts,
    gpu_latest,
    gpu_samples,
    host_latest,
    host_samples,
    metric_points,
)
from tests.latest_rows import refresh_latest, store_chunk

NS = 10**9
NOW = 1_800_000_000 * NS


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _device(engine: Engine, name: str, *, gpus: int = 2, seen_ns: int = NOW, interval_s: float = 1.0) -> int:
    inventory = {
        "batch_interval_s": interval_s,
        "gpus": [
            {"index": i, "name": "NVIDIA A100", "uuid": f"GPU-{name}-{i}", "memory_total_bytes": 80e9}
            for i in range(gpus)
        ],
    }
    with Session(engine) as s:
        d = Device(agent_id=f"agent-{name}", name=name, kind="server", labels={}, inventory=inventory,
                   first_seen_ns=seen_ns - 3600 * NS, last_seen_ns=seen_ns)  # fmt: skip
        s.add(d)
        s.commit()
        return d.id


def _rules(extra: str = ""):  # type: ignore[no-untyped-def]
    return parse_rules(f"""
[[notifier]]
name = "ops"
type = "webhook"
url = "http://127.0.0.1:9/hook"

[[rule]]
name = "hot-gpu"
metric = "gpu.temp_c"
above = 85
lookback = "10s"
notify = ["ops"]

[[rule]]
name = "busy-host"
metric = "host.cpu_percent"
above = 90
lookback = "10s"
notify = ["ops"]
{extra}
""")


def _firing(engine: Engine) -> dict[tuple[str, str | None], dict]:
    """{(rule, gpu label or None): facts} of the firing alerts."""
    with engine.connect() as c:
        rows = c.execute(select(alerts).where(alerts.c.state == "firing")).all()
    return {(r.rule, (r.labels or {}).get("gpu")): r.facts for r in rows}


def _scrape(engine: Engine, now_ns: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = FleetExposition(engine, cache_s=0, clock=lambda: now_ns).render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body)
        for s in fam.samples
    }


def _value(scraped: dict, name: str, **labels: str) -> float | None:
    got = [
        v
        for (n, lab), v in scraped.items()
        if n == name and all(dict(lab).get(k) == w for k, w in labels.items())
    ]
    assert len(got) <= 1, got
    return got[0] if got else None


def _gpu(ts: int, gpu: int, temp: float | None, util: float = 50.0) -> dict:
    return {"ts_ns": ts, "gpu_index": gpu, "temp_c": temp, "util_gpu_percent": util, "memory_used_bytes": 10e9 * (gpu + 1),
            "power_w": 100.0 + gpu}  # fmt: skip


def _host(ts: int, cpu: float | None) -> dict:
    return {
        "ts_ns": ts,
        "cpu_percent": cpu,
        "mem_used_bytes": 3e9,
        "mem_total_bytes": 8e9,
        "cpu_cores": "[[50, 1200]]",
    }


def test_a_device_stored_only_as_chunks_shows_now_everywhere(engine: Engine) -> None:
    d = _device(engine, "srv")
    with engine.begin() as c:
        store_chunk(
            c,
            "gpu",
            d,
            [_gpu(NOW - k * NS, g, 80.0 + k + 5 * g, util=10.0 * g + k) for k in (3, 2, 1) for g in (0, 1)],
        )
        store_chunk(c, "host", d, [_host(NOW - k * NS, 90.0 + k) for k in (3, 2, 1)])
    with engine.connect() as c:
        assert c.execute(select(func.count()).select_from(gpu_samples)).scalar_one() == 0, (
            "nothing in the tail"
        )
        assert c.execute(select(func.count()).select_from(host_samples)).scalar_one() == 0
    # The newest second: GPU 0 at 81 C (util 1), GPU 1 at 86 C (util 11); the host at 91 %.
    with Session(engine) as s:
        latest = latest_readings(session=s, now_ns=NOW)
        fleet = fleet_overview(session=s, now_ns=NOW)
    assert [(g.gpu_index, g.ts_ns, g.values["temp_c"], g.values["util_gpu_percent"]) for g in latest.gpus] == [
        (0, NOW - NS, 81.0, 1.0), (1, NOW - NS, 86.0, 11.0)]  # fmt: skip
    assert latest.gpus[0].values["memory_total_bytes"] is None, "no GPU state stored: none"
    assert [(h.ts_ns, h.values["cpu_percent"], h.values["mem_used_bytes"]) for h in latest.hosts] == [
        (NOW - NS, 91.0, 3e9)
    ]
    (dev,) = fleet.devices
    assert dev.online
    assert (dev.util_percent, dev.temp_c, dev.power_w, dev.memory_used_bytes) == (6.0, 86.0, 201.0, 30e9)
    assert (dev.cpu_percent, dev.host_mem_used_bytes, dev.host_mem_total_bytes) == (91.0, 3e9, 8e9)

    scraped = _scrape(engine, NOW)
    assert _value(scraped, "DCGM_FI_DEV_GPU_TEMP", fleetscope_device="srv", gpu="0") == 81.0
    assert _value(scraped, "DCGM_FI_DEV_GPU_TEMP", fleetscope_device="srv", gpu="1") == 86.0
    assert _value(scraped, "DCGM_FI_DEV_GPU_UTIL", fleetscope_device="srv", gpu="1") == 11.0
    assert _value(scraped, "fleetscope_host_cpu_utilization_ratio", fleetscope_device="srv") == pytest.approx(
        0.91
    )

    AlertJob(engine, _rules()).run_once(NOW)
    firing = _firing(engine)
    assert set(firing) == {("hot-gpu", "1"), ("busy-host", None)}
    assert firing[("hot-gpu", "1")]["value"] == 86.0 and firing[("hot-gpu", "1")]["sample_ns"] == NOW - NS
    assert firing[("busy-host", None)]["value"] == 91.0


def test_a_replayed_older_batch_does_not_hide_the_newer_reading(engine: Engine) -> None:
    d = _device(engine, "drone", gpus=1)
    with engine.begin() as c:
        store_chunk(c, "gpu", d, [_gpu(NOW - 2 * NS, 0, 60.0), _gpu(NOW - NS, 0, 61.0)])
        store_chunk(c, "host", d, [_host(NOW - NS, 20.0)])
    with engine.begin() as c:  # the spool's backlog arrives after: hotter, busier, older
        store_chunk(c, "gpu", d, [_gpu(NOW - 5 * NS, 0, 99.0), _gpu(NOW - 4 * NS, 0, 98.0)])
        store_chunk(c, "host", d, [_host(NOW - 5 * NS, 99.0)])
        # a tail row of the old collector, as old: refreshing the latest tables keeps the newer row
        c.execute(
            insert(gpu_samples), [{"device_id": d, "ts_ns": NOW - 3 * NS, "gpu_index": 0, "temp_c": 97.0}]
        )
        refresh_latest(c)
    with engine.connect() as c:
        assert c.execute(select(gpu_latest.c.ts_ns, gpu_latest.c.temp_c)).all() == [(NOW - NS, 61.0)]
        assert c.execute(select(host_latest.c.ts_ns, host_latest.c.cpu_percent)).all() == [(NOW - NS, 20.0)]
    with Session(engine) as s:
        latest = latest_readings(session=s, now_ns=NOW)
        (dev,) = fleet_overview(session=s, now_ns=NOW).devices
    assert [(g.ts_ns, g.values["temp_c"]) for g in latest.gpus] == [(NOW - NS, 61.0)]
    assert [(h.ts_ns, h.values["cpu_percent"]) for h in latest.hosts] == [(NOW - NS, 20.0)]
    assert (dev.temp_c, dev.cpu_percent) == (61.0, 20.0)
    assert _value(_scrape(engine, NOW), "DCGM_FI_DEV_GPU_TEMP", fleetscope_device="drone", gpu="0") == 61.0
    report = AlertJob(engine, _rules()).run_once(NOW)
    assert report.active == 0 and _firing(engine) == {}


def test_a_reading_missed_once_does_not_resolve_an_alert(engine: Engine) -> None:
    """The newest row has no temperature (the sampler's call failed once): the newest sample
    within the lookback that has one counts, from the chunks as from the tail."""
    d = _device(engine, "srv", gpus=2)
    with engine.begin() as c:
        store_chunk(c, "gpu", d, [_gpu(NOW - 3 * NS, 0, 92.0), _gpu(NOW - 3 * NS, 1, 50.0)])
        store_chunk(c, "host", d, [_host(NOW - 3 * NS, 95.0)])
    job = AlertJob(engine, _rules())
    job.run_once(NOW)
    assert set(_firing(engine)) == {("hot-gpu", "0"), ("busy-host", None)}
    with engine.begin() as c:
        store_chunk(c, "gpu", d, [_gpu(NOW - NS, 0, None), _gpu(NOW - NS, 1, 51.0)])
        store_chunk(c, "host", d, [_host(NOW - NS, None)])
    report = job.run_once(NOW + NS)
    assert report.resolved == 0
    firing = _firing(engine)
    assert set(firing) == {("hot-gpu", "0"), ("busy-host", None)}
    # Past the lookback of the last sample that had a value, the alert resolves.
    report = job.run_once(NOW + 9 * NS)
    assert report.resolved == 2 and _firing(engine) == {}


def test_rows_written_the_old_way_read_as_they_did_once_migration_0011_carries_them(db_url: str) -> None:
    engine = make_engine(db_url, create=False)
    try:
        migrations.upgrade(engine, "0010")
        # srv: two GPUs; GPU 1 stopped reporting 30 s ago. The newest row of GPU 0 missed its
        # temperature; the one before (within the lookback) had 91 C.
        srv = _device(engine, "srv", gpus=2)
        # ahead: its clock runs 5 s ahead of "now"; 1 s of it is within the Fleet page's window.
        ahead = _device(engine, "ahead", gpus=1)
        # quiet: heard from, but its newest samples are older than the Fleet page's window (20 s).
        quiet = _device(engine, "quiet", gpus=1)
        gpu_rows = [
            {"device_id": srv, "ts_ns": NOW - 30 * NS, "gpu_index": 1, "temp_c": 99.0, "util_gpu_percent": 99.0},
            {"device_id": srv, "ts_ns": NOW - 3 * NS, "gpu_index": 0, "temp_c": 91.0, "util_gpu_percent": 40.0},
            {"device_id": srv, "ts_ns": NOW - 2 * NS, "gpu_index": 0, "temp_c": None, "util_gpu_percent": 42.0},
            *[{"device_id": ahead, "ts_ns": NOW + k * NS, "gpu_index": 0, "temp_c": 70.0 + k, "util_gpu_percent": 10.0 + k}
              for k in range(-1, 6)],
            {"device_id": quiet, "ts_ns": NOW - 40 * NS, "gpu_index": 0, "temp_c": 88.0, "util_gpu_percent": 5.0},
        ]  # fmt: skip
        host_rows = [
            {"device_id": srv, "ts_ns": NOW - 3 * NS, "cpu_percent": 20.0, "mem_used_bytes": 1e9, "mem_total_bytes": 8e9},
            {"device_id": srv, "ts_ns": NOW - 2 * NS, "cpu_percent": 21.0, "mem_used_bytes": 2e9, "mem_total_bytes": 8e9},
            *[{"device_id": ahead, "ts_ns": NOW + k * NS, "cpu_percent": 30.0 + k, "mem_used_bytes": 1e9, "mem_total_bytes": 4e9}
              for k in range(-1, 6)],
        ]  # fmt: skip
        with engine.begin() as c:
            c.execute(insert(gpu_samples), gpu_rows)
            c.execute(insert(host_samples), host_rows)
        migrations.upgrade(engine)  # 0011 fills the latest tables from the tail
        with engine.connect() as c:
            assert c.execute(select(func.count()).select_from(gpu_latest)).scalar_one() == 4
            assert c.execute(select(func.count()).select_from(host_latest)).scalar_one() == 2

        with Session(engine) as s:
            latest = latest_readings(session=s, now_ns=NOW)
            fleet = {d.name: d for d in fleet_overview(session=s, now_ns=NOW).devices}
        # Every GPU at its device's newest sample time: srv's GPU 1 (30 s old) is not "now".
        assert [(g.device, g.gpu_index, g.ts_ns, g.values["temp_c"]) for g in latest.gpus] == [
            ("ahead", 0, NOW + 5 * NS, 75.0), ("quiet", 0, NOW - 40 * NS, 88.0), ("srv", 0, NOW - 2 * NS, None)]  # fmt: skip
        assert [(h.device, h.ts_ns, h.values["cpu_percent"]) for h in latest.hosts] == [
            ("ahead", NOW + 5 * NS, 35.0), ("srv", NOW - 2 * NS, 21.0)]  # fmt: skip
        # The Fleet page: the newest reading within [now - 20 s, now] of each GPU and the host.
        assert (fleet["srv"].util_percent, fleet["srv"].temp_c, fleet["srv"].cpu_percent) == (
            42.0,
            None,
            21.0,
        )
        assert (fleet["ahead"].util_percent, fleet["ahead"].temp_c, fleet["ahead"].cpu_percent) == (
            10.0,
            70.0,
            30.0,
        )
        assert (fleet["quiet"].util_percent, fleet["quiet"].temp_c) == (None, None)

        AlertJob(engine, _rules()).run_once(NOW)
        firing = _firing(engine)
        assert set(firing) == {("hot-gpu", "0")}, (
            "srv GPU 0's 91 C counts; GPU 1 and quiet are past the lookback"
        )
        assert firing[("hot-gpu", "0")]["sample_ns"] == NOW - 3 * NS
    finally:
        engine.dispose()


def test_each_jetson_point_name_reads_at_its_own_newest_time(engine: Engine) -> None:
    """Every label set of a point name at the device's newest time for that name (two rails at
    once), older readings of it left out, each name's newest time its own, each device's its own:
    what ``/metrics/fleet`` shows for a drone (on Citus one statement for every name)."""
    with Session(engine) as s:
        from fleetscope.collector.storage.schema import Device as D

        for name in ("drone-a", "drone-b"):
            s.add(D(agent_id=f"agent-{name}", name=name, kind="jetson", labels={}, first_seen_ns=NOW - 3600 * NS,
                    last_seen_ns=NOW, inventory={"batch_interval_s": 1.0, "gpus": []}))  # fmt: skip
        s.commit()
        ids = {d.name: d.id for d in s.query(D)}
    a, b = ids["drone-a"], ids["drone-b"]
    rows = [
        (a, NOW - 20 * NS, "jetson.power_mw", 5000.0, '{"rail":"VDD_IN"}'),  # older: left out
        (a, NOW - 10 * NS, "jetson.power_mw", 6000.0, '{"rail":"VDD_IN"}'),
        (a, NOW - 10 * NS, "jetson.power_mw", 2000.0, '{"rail":"VDD_CPU_GPU_CV"}'),
        (a, NOW - 30 * NS, "jetson.temp_c", 51.0, '{"sensor":"cpu"}'),  # its name's newest, older than power's
        (a, NOW - 5 * NS, "other.metric", 1.0, "{}"),  # not a Jetson point the exposition shows
        (b, NOW - 40 * NS, "jetson.power_mw", 7000.0, '{"rail":"VDD_IN"}'),
        (b, NOW - 50 * NS, "jetson.power_mw", 1.0, '{"rail":"VDD_CPU_GPU_CV"}'),  # older than b's newest: left out
    ]
    with engine.begin() as conn:
        conn.execute(insert(metric_points), [dict(zip(("device_id", "ts_ns", "name", "value", "labels"), r)) for r in rows])
    with Session(engine) as s:
        got = latest_readings(session=s, now_ns=NOW)
    assert sorted((p.device, p.name, tuple(p.labels.items()), p.ts_ns, p.value) for p in got.points) == [
        ("drone-a", "jetson.power_mw", (("rail", "VDD_CPU_GPU_CV"),), NOW - 10 * NS, 2000.0),
        ("drone-a", "jetson.power_mw", (("rail", "VDD_IN"),), NOW - 10 * NS, 6000.0),
        ("drone-a", "jetson.temp_c", (("sensor", "cpu"),), NOW - 30 * NS, 51.0),
        ("drone-b", "jetson.power_mw", (("rail", "VDD_IN"),), NOW - 40 * NS, 7000.0),
    ]


def test_the_reads_run_at_once_answer_as_the_reads_in_turn(engine: Engine) -> None:
    """``/metrics/fleet`` on a server database runs ``latest_readings``' reads at once, each in a
    session of its own (``parallel_parts``): the same answer as one session reading in turn, for
    every part (devices, GPUs with their state, hosts, Jetson points, incident and Xid tallies),
    and a device not heard from lately still listed but without readings."""
    from fleetscope.collector.query.latest import parallel_parts
    from fleetscope.collector.storage.schema import Incident, gpu_state

    srv, drone = _device(engine, "srv"), _device(engine, "drone", gpus=1)
    _device(engine, "gone", seen_ns=NOW - 3600 * NS)
    with engine.begin() as c:
        c.execute(Device.__table__.update().where(Device.id == drone).values(kind="jetson"))
        store_chunk(c, "gpu", srv, [_gpu(NOW - k * NS, g, 70.0 + g) for k in (2, 1) for g in (0, 1)])
        store_chunk(c, "gpu", drone, [_gpu(NOW - NS, 0, 55.0)])
        store_chunk(c, "host", srv, [_host(NOW - NS, 40.0)])
        c.execute(insert(gpu_state), [{"device_id": srv, "gpu_index": g, "ts_ns": NOW - 5 * NS,
                                       "memory_total_bytes": 80e9, "retired_pages": g} for g in (0, 1)])
        c.execute(insert(metric_points), [{"device_id": drone, "ts_ns": NOW - NS, "name": "jetson.temp_c", "value": 48.0,
                                           "labels": '{"sensor":"gpu"}'}])
    with Session(engine) as s:
        for kind, key, gpu, state in (("cuda_oom", "", 0, "open"), ("gpu_xid", "xid:79", 1, "resolved")):
            s.add(Incident(device_id=srv, ts_ns=NOW - 9 * NS, received_ns=NOW - 9 * NS, kind=kind, severity="error",
                           title=kind, gpu_index=gpu, group_key=key, state=state, count=3, last_seen_ns=NOW - 8 * NS,
                           updated_ns=NOW - 8 * NS))
        s.commit()
    with Session(engine) as s:
        in_turn = latest_readings(session=s, now_ns=NOW)
        with parallel_parts(engine) as run_apart:
            at_once = latest_readings(session=s, now_ns=NOW, run_apart=run_apart)
    assert at_once == in_turn
    assert [d.name for d in at_once.devices] == ["drone", "gone", "srv"]
    assert [(g.device, g.gpu_index, g.values["temp_c"], g.values["retired_pages"]) for g in at_once.gpus] == [
        ("drone", 0, 55.0, None), ("srv", 0, 70.0, 0), ("srv", 1, 71.0, 1)]  # fmt: skip
    assert [h.device for h in at_once.hosts] == ["srv"]
    assert [(p.device, p.value) for p in at_once.points] == [("drone", 48.0)]
    assert [(t.kind, t.occurrences, t.open) for t in at_once.incidents] == [("cuda_oom", 3, 1), ("gpu_xid", 3, 0)]
    assert [(x.gpu_index, x.xid, x.occurrences) for x in at_once.xids] == [(1, 79, 3)]
