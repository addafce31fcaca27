"""The device around an incident (``incident_with_context`` / ``incidents_with_context``) on
SQLite and PostgreSQL, with the data put in through the real pipeline: an agent's records, its
spool and uplink, a collector over gRPC; and ``fleetscope incident ID --json``, which prints it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from fleetscope.agent.records import THROTTLE_REASON_BITS, GpuSample, HostSample, IncidentRecord, LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.cli import main as fleetscope
from fleetscope.collector.query import (
    IncidentView,
    UnknownIncident,
    incident_with_context,
    incidents_with_context,
    search_incidents,
)
from fleetscope.collector.storage.engine import make_engine
from tests.conftest import wait_until
from tests.helpers import IdleSampler, make_agent

S = 10**9
GIB = 1 << 30
STEP_S = 10  # one sample every 10 s, from 3 minutes before to 3 minutes after
TOTAL = [24 * GIB, 16 * GIB]  # per GPU


def _gpu(ts: int, index: int, k: int) -> GpuSample:
    # k: seconds from the sample at the incident (0). Memory fills towards it, then is freed.
    used = TOTAL[index] - (abs(k) + 1) * 64 * (1 << 20) if index == 0 else 4 * GIB + k * (1 << 20)
    hot = index == 0 and -20 <= k <= 0
    return GpuSample(
        ts_ns=ts,
        gpu_index=index,
        util_gpu_percent=99.0 if index == 0 else 10.0,
        memory_used_bytes=used,
        memory_total_bytes=TOTAL[index],
        temp_c=(85.0 if hot else 70.0) + index,
        power_w=300.0 - index,
        sm_clock_mhz=1410.0 if not hot else 1110.0,
        throttle_reasons=(THROTTLE_REASON_BITS["sw_power_cap"] | THROTTLE_REASON_BITS["hw_thermal_slowdown"])
        if hot
        else 0,
    )


def _host(ts: int, k: int) -> HostSample:
    return HostSample(
        ts_ns=ts,
        cpu_percent=50.0,
        mem_total_bytes=64 * GIB,
        mem_used_bytes=60 * GIB + k * (1 << 20),
        mem_available_bytes=4 * GIB - k * (1 << 20),
        swap_total_bytes=8 * GIB,
        swap_used_bytes=2 * GIB,
    )


@pytest.fixture
def stored(tmp_path: Path, db_url: str, quiet_collector):  # type: ignore[no-untyped-def]
    """Samples every 10 s over ±3 min of a CUDA OOM at T+3 s, logs around it, one unrelated device.

    One batch per sampling step, as an agent sends them, so the GPU state row (stored on change,
    stamped with its batch's last sample) is the one of the first step, 3 minutes before.
    """
    t0 = (time.time_ns() - 3600 * S) // S * S  # an hour ago, on a whole second
    incident_ts = t0 + 3 * S
    log_offsets = [-20, -9, 0, 2, 10, 15]
    steps = []
    for k in range(-180, 181, STEP_S):
        ts = t0 + k * S
        step = SampleSet(gpu=[_gpu(ts, 0, k), _gpu(ts, 1, k)], host=[_host(ts, k)])
        step.logs.extend(
            LogEvent(
                ts_ns=incident_ts + o * S,
                source="/var/log/train.log",
                message=f"line at {o:+d}s",
                level="info",
            )
            for o in log_offsets
            if k <= o < k + STEP_S
        )
        if k == 0:
            step.incidents.append(
                IncidentRecord(
                    ts_ns=incident_ts,
                    kind="cuda_oom",
                    severity="error",
                    title="CUDA OOM on cuda:0: tried to allocate 2.00 GiB",
                    facts={"device_index": 0},
                    source="/var/log/train.log",
                    excerpt="torch.OutOfMemoryError: CUDA out of memory.",
                )
            )
        steps.append(step)
    # The neighbour's samples share the time range and must never leak into the context.
    other = SampleSet(
        gpu=[GpuSample(ts_ns=t0, gpu_index=0, temp_c=99.0, memory_used_bytes=1, memory_total_bytes=2)],
        host=[HostSample(ts_ns=t0, mem_used_bytes=1)],
        logs=[LogEvent(ts_ns=incident_ts, source="x", message="neighbour")],
    )
    _send(tmp_path, quiet_collector.port, "gpu-node-1", steps)
    _send(tmp_path, quiet_collector.port, "gpu-node-2", [other])
    engine = make_engine(db_url, create=False)

    # The detector pass resolves the hour-old OOM as quiet and gives it its hints: wait for both, so
    # that the readers compared below read one settled incident, not one from before that pass and
    # one from after it (a loaded CI machine put the pass between two reads).
    def settled() -> bool:
        with Session(engine) as session:
            view = _the_incident(session)
        return view.state == "resolved" and bool(view.hints)

    wait_until(settled, timeout_s=60, message="the detector pass to resolve the OOM and give it its hints")
    yield engine, t0, incident_ts, log_offsets
    engine.dispose()


def _send(tmp_path: Path, port: int, name: str, batches: list[SampleSet]) -> None:
    """Through a real agent: pending records -> spool -> uplink -> collector, until all are acked."""
    agent = make_agent(tmp_path, [f"127.0.0.1:{port}"], IdleSampler(), name=name)
    for records in batches:
        agent.add(records)
        agent.flush()
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), "batches not acknowledged"
    finally:
        agent.uplink.stop()
        agent.spool.close()


def _the_incident(session: Session) -> IncidentView:
    (view,) = search_incidents(session=session, since_ns=0, until_ns=2**62, devices=["gpu-node-1"])
    return view


def test_context_holds_the_samples_of_the_window(stored) -> None:  # type: ignore[no-untyped-def]
    engine, t0, ts, _ = stored
    with Session(engine) as session:
        ctx = incident_with_context(session=session, incident_id=_the_incident(session).id)
    assert (ctx.incident.device, ctx.incident.ts_ns) == ("gpu-node-1", ts)
    assert (ctx.since_ns, ctx.until_ns) == (ts - 60 * S, ts + 60 * S)
    # Samples at T-50 ... T+60 s (the window is T+3 s ± 60 s, ends included).
    want = [t0 + k * S for k in range(-50, 61, STEP_S)]
    assert [p.ts_ns for p in ctx.host] == want
    assert [(p.ts_ns, p.gpu_index) for p in ctx.gpu] == [(t, i) for t in want for i in (0, 1)]
    assert ctx.host[5].values["mem_used_bytes"] == 60 * GIB  # the sample at T
    # GPU state is stored when it changes: the row in force at the window's start, per GPU.
    assert [(s.gpu_index, s.ts_ns, s.values["memory_total_bytes"]) for s in ctx.gpu_state] == [
        (0, t0 - 180 * S, TOTAL[0]),
        (1, t0 - 180 * S, TOTAL[1]),
    ]


def test_summary_at_the_incident(stored) -> None:  # type: ignore[no-untyped-def]
    engine, t0, _, _ = stored
    with Session(engine) as session:
        s = incident_with_context(session=session, incident_id=_the_incident(session).id).summary
    g0, g1 = s.gpus
    # The incident is at T+3 s: the latest sample at or before it is the one at T.
    assert (g0.gpu_index, g0.sample_ts_ns, g1.sample_ts_ns) == (0, t0, t0)
    assert (g0.memory_used_bytes, g0.memory_total_bytes) == (TOTAL[0] - 64 * (1 << 20), TOTAL[0])
    assert (g1.memory_used_bytes, g1.memory_total_bytes) == (4 * GIB, TOTAL[1])
    assert (g0.temp_c, g0.sm_clock_mhz, g0.util_gpu_percent, g0.power_w) == (85.0, 1110.0, 99.0, 300.0)
    assert g0.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert g1.throttle_reasons == () and g1.sm_clock_mhz == 1410.0
    assert s.max_temp_c == 85.0 and s.window_max_temp_c == 85.0
    assert s.host is not None and s.host.sample_ts_ns == t0
    assert (s.host.mem_used_bytes, s.host.mem_available_bytes) == (60 * GIB, 4 * GIB)
    assert (s.host.swap_used_bytes, s.host.swap_total_bytes, s.host.mem_total_bytes) == (
        2 * GIB,
        8 * GIB,
        64 * GIB,
    )


def test_log_lines_within_ten_seconds(stored) -> None:  # type: ignore[no-untyped-def]
    engine, _, ts, offsets = stored
    with Session(engine) as session:
        ctx = incident_with_context(session=session, incident_id=_the_incident(session).id)
    assert [ln.message for ln in ctx.logs] == [f"line at {o:+d}s" for o in offsets if abs(o) <= 10]
    assert all(ln.device == "gpu-node-1" and ln.source == "/var/log/train.log" for ln in ctx.logs)
    assert [ln.ts_ns for ln in ctx.logs] == sorted(ln.ts_ns for ln in ctx.logs)


def test_narrow_and_one_sided_windows(stored) -> None:  # type: ignore[no-untyped-def]
    engine, t0, _, _ = stored
    with Session(engine) as session:
        iid = _the_incident(session).id
        before_only = incident_with_context(session=session, incident_id=iid, before_s=25, after_s=0)
        after_only = incident_with_context(session=session, incident_id=iid, before_s=0, after_s=20)
    assert [p.ts_ns for p in before_only.host] == [t0 - 20 * S, t0 - 10 * S, t0]
    assert [p.ts_ns for p in after_only.host] == [t0 + 10 * S, t0 + 20 * S]
    # No sample at or before the incident inside the window: the first one after it stands in.
    assert after_only.summary.host is not None and after_only.summary.host.sample_ts_ns == t0 + 10 * S
    assert [g.sample_ts_ns for g in after_only.summary.gpus] == [t0 + 10 * S] * 2
    assert after_only.summary.gpus[0].memory_total_bytes == TOTAL[0]  # state from before the window


def test_incidents_with_context_are_the_found_incidents_in_context(stored) -> None:  # type: ignore[no-untyped-def]
    engine, _, ts, _ = stored
    with Session(engine) as session:
        view = _the_incident(session)
        (one,) = incidents_with_context(
            session=session, since_ns=ts - S, until_ns=ts + S, devices=["gpu-node-1"]
        )
        assert (
            incidents_with_context(session=session, since_ns=ts - S, until_ns=ts + S, kinds=["gpu_xid"]) == []
        )
        alone = incident_with_context(session=session, incident_id=view.id)
    assert isinstance(one.incident, IncidentView) and one.incident == view
    assert (one.incident.kind, one.incident.facts, one.incident.device) == (
        "cuda_oom",
        {"device_index": 0},
        "gpu-node-1",
    )
    assert one == alone
    assert one.nearby == () and one.series is None, "no other incident nearby; charts are asked for"


def test_cli_json_lists_the_incidents_and_incident_id_json_gives_one_whole(stored, db_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    engine, _, ts, _ = stored
    assert fleetscope(["incidents", "--db", db_url, "--device", "gpu-node-1", "--json"]) == 0
    listed = capsys.readouterr().out
    (doc,) = json.loads(listed)["incidents"]
    with Session(engine) as session:
        alone = incident_with_context(session=session, incident_id=_the_incident(session).id)
    # A list gives the incidents, their fields and facts, not the device's samples around each
    # (issue 27: two incidents made 4.1 MB).
    assert (doc["id"], doc["kind"], doc["facts"], doc["ts_ns"]) == (alone.incident.id, "cuda_oom", {"device_index": 0}, ts)
    assert "context" not in doc and "gpu_samples" not in listed
    assert fleetscope(["incident", str(doc["id"]), "--db", db_url, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    # The same fields as the list, and the context. The lifecycle's own fields may move between
    # the two calls: the event incident resolves after its quiet period, on a busy machine in between.
    # So may its hints: the detector pass gives an event incident its hints once, after it
    # lands, and on a busy machine that pass can fall between the two calls as well.
    moving = {"state", "ended_ns", "updated_ns", "hints"}
    assert set(whole) - {"context"} == set(doc), "the same fields as the list, and the context"
    assert {k: v for k, v in whole.items() if k not in moving | {"context"}} == {k: v for k, v in doc.items() if k not in moving}
    assert list(whole["context"]) == [
        "incident_id", "device", "ts_ns", "since_ns", "until_ns", "summary", "host", "gpu", "gpu_state", "logs", "nearby",
    ]  # fmt: skip
    assert (whole["context"]["incident_id"], whole["context"]["ts_ns"]) == (alone.incident.id, ts)
    assert whole["context"]["summary"]["gpus"][0]["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    with Session(engine) as session:  # what `incident` asks for: 5 minutes either side, log lines a minute either side
        alone = incident_with_context(session=session, incident_id=doc["id"], before_s=300, after_s=300, log_window_s=60,
                                      log_limit=200)
    assert len(whole["context"]["gpu"]) == len(alone.gpu) and len(whole["context"]["logs"]) == len(alone.logs)
    assert len(listed) * 5 < len(json.dumps(whole)), "the list is a fraction of one incident whole"


def test_context_for_charts_has_one_second_buckets_of_the_window(stored) -> None:  # type: ignore[no-untyped-def]
    engine, _, _, _ = stored
    with Session(engine) as session:
        ctx = incident_with_context(session=session, incident_id=_the_incident(session).id, with_series=True)
    assert ctx.series is not None and ctx.series.step_s == 1 and ctx.series.since_ns == ctx.since_ns
    # The same samples as the raw points: one per 10 s, each alone in its 1 s bucket.
    assert sorted(set(ctx.series.gpu.columns["ts_ns"])) == [p.ts_ns for p in ctx.host]


def test_unknown_incident(stored) -> None:  # type: ignore[no-untyped-def]
    engine, _, _, _ = stored
    with Session(engine) as session, pytest.raises(UnknownIncident, match="no incident with id 999999"):
        incident_with_context(session=session, incident_id=999999)


def test_imported_incident_without_samples_has_an_empty_context(db_url: str, tmp_path: Path) -> None:
    from fleetscope.agent.tools.scan import scan_files
    from fleetscope.collector.ingest.scan_import import import_scan_results

    log = tmp_path / "kern.log"
    log.write_text(
        "kern  :warn  : 2025-03-02T08:15:00,000001+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, "
        "GPU has fallen off the bus.\n"
    )
    engine = make_engine(db_url)
    try:
        import_scan_results(engine, device="old", results=scan_files([log]))
        with Session(engine) as session:
            (one,) = incidents_with_context(session=session, since_ns=0, until_ns=2**62)
        ctx = one
        assert (ctx.host, ctx.gpu, ctx.gpu_state, ctx.logs) == ((), (), (), ())
        assert (ctx.summary.gpus, ctx.summary.host, ctx.summary.max_temp_c) == ((), None, None)
    finally:
        engine.dispose()


def test_state_stored_after_the_window_still_gives_the_totals(tmp_path: Path, db_url: str, collector) -> None:  # type: ignore[no-untyped-def]
    # One batch for a minute of samples: its state row carries the batch's last time, T+30 s.
    t0 = (time.time_ns() - 600 * S) // S * S
    batch = SampleSet(
        gpu=[_gpu(t0 + k * S, 0, k) for k in range(-30, 31, STEP_S)],
        incidents=[IncidentRecord(ts_ns=t0, kind="cuda_oom", severity="error", title="oom")],
    )
    _send(tmp_path, collector.port, "one-batch", [batch])
    engine = make_engine(db_url, create=False)
    try:
        with Session(engine) as session:
            (view,) = search_incidents(session=session, since_ns=0, until_ns=2**62, devices=["one-batch"])
            ctx = incident_with_context(session=session, incident_id=view.id, before_s=10, after_s=10)
    finally:
        engine.dispose()
    assert [p.ts_ns for p in ctx.gpu] == [t0 - 10 * S, t0, t0 + 10 * S]
    assert [s.ts_ns for s in ctx.gpu_state] == [t0 + 30 * S]
    (g,) = ctx.summary.gpus
    assert (g.sample_ts_ns, g.memory_total_bytes) == (t0, TOTAL[0])
