"""A small fleet for the checks of issue 18's dashboard points, through the real pipeline (agents,
spool, gRPC uplink, an in-process collector on a SQLite file), built in about 15 s:

* ``drone-7``, reinstalled with a fresh state directory: two agent ids under one name, each
  install with its own samples, log line, incident and latency histograms;
* an 8-GPU server and a Jetson from the simulator, running for a few seconds (the server's GPU
  processes, ECC, PCIe and limits; the Jetson's rails, engines and nvpmodel);
* ``old-server``, imported by ``fleetscope scan --db`` (an imported OOM): neither offline nor open.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fleetscope.agent.records import GpuSample, HostSample, IncidentRecord, LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.tools.simulate import build_fleet
from fleetscope.proto import buckets as bucket_math
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.helpers import IdleSampler, make_agent

S = 10**9
GIB = 1 << 30
TOKEN = "test-token"
LONG_MESSAGE = (
    "RuntimeError: CUDA error: an illegal memory access was encountered while running the detector head "
    "on batch 17 of the video stream; compile with TORCH_USE_CUDA_DSA to enable device-side assertions "
    "and set CUDA_LAUNCH_BLOCKING=1 to see the kernel that failed (this line is long: the end must show)"
)


@dataclass
class SmallFleet:
    url: str
    drone: str  # the reinstalled one
    first_agent: str
    second_agent: str
    server: str  # 8 GPUs
    jetson: str
    imported: str
    first_ns: int  # the first install's first sample
    second_ns: int  # the second install's first sample


def _latency(t0: int, base_ms: float) -> pb.SdkReport:
    hist: dict[int, int] = {}
    durations = [base_ms + (i % 5) for i in range(100)]
    for ms in durations:
        i = bucket_math.bucket_index(ms * 1e6)
        hist[i] = hist.get(i, 0) + 1
    return pb.SdkReport(latency=[pb.LatencyHistogram(
        name="infer", start_ns=t0, end_ns=t0 + 10 * S, count=len(durations), sum_ns=int(sum(durations) * 1e6),
        bucket_index=list(hist), bucket_count=list(hist.values()))])


def _install(t: int, used_gib: float, note: str, kind: str, message: str) -> SampleSet:
    return SampleSet(
        gpu=[GpuSample(ts_ns=t + k * 10 * S, gpu_index=0, util_gpu_percent=10.0 * (k + 1), temp_c=50.0 + k,
                       memory_used_bytes=int((used_gib + k) * GIB), memory_total_bytes=8 * GIB, power_w=10.0)
             for k in range(3)],
        host=[HostSample(ts_ns=t + k * 10 * S, cpu_percent=20.0 + k, mem_total_bytes=16 * GIB,
                         mem_used_bytes=(4 + k) * GIB) for k in range(3)],
        logs=[LogEvent(ts_ns=t + S, source="/var/log/app.log", message=message, level="warning")],
        incidents=[IncidentRecord(ts_ns=t + 2 * S, kind=kind, severity="error", title=f"{kind} on the {note} install")],
    )


def _send(state_dir: Path, address: str, name: str, records: SampleSet, report: pb.SdkReport, *, final: bool = True) -> str:
    state_dir.mkdir(parents=True, exist_ok=True)
    agent = make_agent(state_dir, [address], IdleSampler(), name=name)
    agent.add(records)
    agent.add_sdk_report(report)
    # final: a clean stop, so the install is "stopped", not offline, however long the tests take;
    # without it the device is lost (its link gone), offline once its silence passes the threshold.
    agent.flush(final=final)
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), "batches not acknowledged"
    finally:
        agent.uplink.stop()
        agent.spool.close()
    return agent.settings.spool_dir.name


def build(tmp: Path) -> SmallFleet:
    from sqlalchemy.orm import Session

    from fleetscope.collector import query
    from fleetscope.collector.ingest.scan_import import ImportedIncident, import_incidents
    from fleetscope.collector.ingest.server import Collector, CollectorSettings
    from fleetscope.collector.storage.engine import make_engine

    url = f"sqlite:///{tmp / 'fleet.db'}"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]), grace_s=2.0))
    collector.start()
    try:
        address = f"127.0.0.1:{collector.port}"
        now = time.time_ns() // S * S
        first_ns, second_ns = now - 150 * S, now - 60 * S
        _send(tmp / "first", address, "drone-7",
              _install(first_ns, 1.0, "first", "cuda_oom", "first install line"), _latency(first_ns, 10.0))
        _send(tmp / "second", address, "drone-7",
              _install(second_ns, 4.0, "second", "host_oom", LONG_MESSAGE), _latency(second_ns, 30.0))
        fleet = build_fleet(collectors=[address], token=TOKEN, devices=2, state_dir=tmp / "sim", interval_s=1.0,
                            jetson_share=0.5, gpus_per_server=8, name_prefix="t", latency=False)
        fleet.start()
        time.sleep(6)
        fleet.stop()
    finally:
        collector.stop()
    engine = make_engine(url)
    try:
        import_incidents(engine, device="old-server", incidents=[ImportedIncident(
            key="k1", ts_ns=now - 3600 * S, kind="cuda_oom", severity="error", title="an old OOM from a log file",
            facts={}, source="/x.log", excerpt="")])
    finally:
        engine.dispose()
    db = query.open_database(url)
    try:
        with Session(db) as s:
            installs = query.device_installs(session=s, device="drone-7", now_ns=time.time_ns())
            names = [d.name for d in query.list_devices(session=s, now_ns=time.time_ns())]
    finally:
        db.dispose()
    second, first = (d.agent_id for d in installs)  # newest first
    return SmallFleet(
        url=url, drone="drone-7", first_agent=first, second_agent=second,
        server=next(n for n in names if n.startswith("t-gpu-")), jetson=next(n for n in names if n.startswith("t-drone-")),
        imported="old-server", first_ns=first_ns, second_ns=second_ns,
    )
