"""A small fleet through the real pipeline, for the dashboard's tests.

Simulated devices run through real agents (spool, batcher, gRPC uplink) into an in-process
collector on a SQLite file. On top of the simulator's readings:

* one extra drone goes silent after a few seconds (the offline device the Fleet page must
  flag) and one runs hot, so its GPU throttles (the shaded periods on the Device page);
* two devices run the real SDK against their agent's local socket: they time "infer"
  latencies (drone ~30 ms, server ~4 ms) and report a CUDA OOM / host OOM the way
  ``sdk.report_oom`` does for a caught exception;
* realistic log lines (an Xid, trtexec performance summaries) go through the agents' log
  classifiers, exactly as the file follower would hand them over;
* the rollup job runs once, as a collector's would, so part of each series comes from rollups.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from fleetscope.agent.classify import classify_event
from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.records import LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.tools.simulate import OOM_LINE, XID_LINE, SimulatedFleet, SimulatedSampler, build_fleet
from fleetscope.proto.v1 import telemetry_pb2 as pb

TOKEN = "test-token"
NS = 10**9

TRTEXEC_JETSON = """&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --onnx=yolov8n.onnx --fp16
[06/02/2025-09:15:00] [I] === Build Options ===
[06/02/2025-09:15:00] [I] Precision: FP32+FP16
[06/02/2025-09:15:00] [I] === Device Information ===
[06/02/2025-09:15:00] [I] Selected Device: Orin
[06/02/2025-09:15:00] [I] Compute Capability: 8.7
[06/02/2025-09:15:00] [I] === Performance summary ===
[06/02/2025-09:15:00] [I] Throughput: 41.5 qps
[06/02/2025-09:15:00] [I] Latency: min = 22.1 ms, max = 31.9 ms, mean = 24.1 ms, median = 23.8 ms, percentile(90%) = 26.2 ms, percentile(95%) = 27.0 ms, percentile(99%) = 29.4 ms
[06/02/2025-09:15:00] [I] GPU Compute Time: min = 20.2 ms, max = 30.0 ms, mean = 22.6 ms, median = 22.3 ms, percentile(99%) = 27.8 ms
[06/02/2025-09:15:00] [I] Total Host Walltime: 3.02 s"""

TRTEXEC_SERVER = """&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --onnx=yolov8n.onnx --fp16
[06/02/2025-09:20:00] [I] === Build Options ===
[06/02/2025-09:20:00] [I] Precision: FP32+FP16
[06/02/2025-09:20:00] [I] === Device Information ===
[06/02/2025-09:20:00] [I] Selected Device: NVIDIA A100-SXM4-80GB
[06/02/2025-09:20:00] [I] Compute Capability: 8.0
[06/02/2025-09:20:00] [I] === Performance summary ===
[06/02/2025-09:20:00] [I] Throughput: 1250.5 qps
[06/02/2025-09:20:00] [I] Latency: min = 0.71 ms, max = 1.20 ms, mean = 0.80 ms, median = 0.79 ms, percentile(90%) = 0.85 ms, percentile(95%) = 0.88 ms, percentile(99%) = 0.95 ms
[06/02/2025-09:20:00] [I] GPU Compute Time: min = 0.65 ms, max = 1.10 ms, mean = 0.74 ms, median = 0.73 ms, percentile(99%) = 0.90 ms
[06/02/2025-09:20:00] [I] Total Host Walltime: 3.00 s"""

HOST_OOM_TEXT = "Unable to allocate 3.20 GiB for an array with shape (1024, 1024, 820) and data type float32"


class HotSampler(SimulatedSampler):
    """A drone flying in the sun: its GPU sits above its thermal limit and throttles."""

    def sample(self, now_ns: int) -> SampleSet:
        out = super().sample(now_ns)
        out.gpu = [
            dataclasses.replace(g, temp_c=88.0, throttle_reasons=0x40, sm_clock_mhz=612.0) for g in out.gpu
        ]
        return out


@dataclass
class Pipeline:
    url: str
    collector: object
    fleet: SimulatedFleet
    extra: list[Agent]
    drones: list[str]
    servers: list[str]
    lost: str
    hot: str
    latency_ms: dict[str, list[float]] = field(default_factory=dict)  # device -> recorded "infer" durations
    alerts: dict[str, int] = field(default_factory=dict)  # what each alert stands for -> its id

    @property
    def all_devices(self) -> list[str]:
        return [*self.drones, *self.servers, self.lost, self.hot]

    def stop(self) -> None:
        self.fleet.stop()
        for a in self.extra:
            a.stop()
        self.collector.stop()  # type: ignore[attr-defined]


def _agent(address: str, state: Path, name: str, sampler: SimulatedSampler, labels: dict[str, str]) -> Agent:
    settings = AgentSettings(
        collectors=(address,),
        spool_dir=state / name,
        token=TOKEN,
        name=name,
        labels=labels,
        interval_s=1.0,
        batch_interval_s=1.0,
        drain_timeout_s=3.0,
    )
    return Agent(
        settings,
        samplers=[sampler],
        inventory=sampler.inventory_message(),
        kind=pb.DEVICE_KIND_JETSON,
        classify=classify_event,
    )


def _classified(agent: Agent, message: str, level: str, source: str) -> None:
    """Hand a log line to the agent with the incidents its classifiers find, as the file follower does."""
    ev = LogEvent(time.time_ns(), source, message, level)
    agent.add(SampleSet(logs=[ev], incidents=classify_event(ev)))


def _sdk_traffic(
    agent: Agent, socket_path: str, durations_ms: list[float], oom: BaseException, seconds: int = 4
) -> None:
    """The real SDK, pointed at this agent's local report server, timing a steady stream."""
    from fleetscope.agent import sdk
    from fleetscope.agent.daemon.local_server import LocalReportServer

    server = LocalReportServer(socket_path, agent.add_sdk_report)
    server.start()
    try:
        # A loaded test machine can take longer than the default second to answer one local RPC.
        sdk.configure(socket=socket_path, flush_interval_s=0.5, rpc_timeout_s=10.0)
        sdk.flush(2.0)  # starts a fresh histogram window: throughput divides by the windows' length
        # A steady stream (ten small bursts a second): every histogram window holds some of it.
        chunk = max(1, len(durations_ms) // (seconds * 10))
        for k in range(0, len(durations_ms), chunk):
            for d in durations_ms[k : k + chunk]:
                sdk.record_duration("infer", int(d * 1e6), model="yolov8n")
            time.sleep(0.1)
        sdk.report_oom(oom, batch_size=32)
        assert sdk.flush(5.0), "the SDK could not reach the agent"
    finally:
        sdk.shutdown(2.0)
        server.stop(1.0)


def wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _stored_span_s(engine, names: list[str]) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds between each named device's oldest and newest stored sample (0 when none), in the
    chunks (what the collector stores) and the tail (rows an older collector wrote) together."""
    from sqlalchemy import func, select

    from fleetscope.collector.storage.schema import Device, host_chunks, host_samples

    h, c = host_samples.c, host_chunks.c
    spans: dict[str, list[int]] = {}
    with engine.connect() as conn:
        for q in (
            select(Device.name, func.min(h.ts_ns), func.max(h.ts_ns)).join(
                host_samples, h.device_id == Device.id
            ),
            select(Device.name, func.min(c.start_ns), func.max(c.end_ns)).join(
                host_chunks, c.device_id == Device.id
            ),
        ):
            for name, lo, hi in conn.execute(q.where(Device.name.in_(names)).group_by(Device.name)).all():
                if lo is None:
                    continue
                have = spans.setdefault(name, [int(lo), int(hi)])
                have[0], have[1] = min(have[0], int(lo)), max(have[1], int(hi))
    return [(spans[n][1] - spans[n][0]) / NS if n in spans else 0.0 for n in names]


def build(tmp: Path, *, offline_after_s: float = 65.0) -> Pipeline:
    """Start the pipeline and return once the lost drone has been silent for ``offline_after_s``."""
    from fleetscope.collector.ingest.server import Collector, CollectorSettings
    from fleetscope.collector.jobs.rollup import RollupJob

    url = f"sqlite:///{tmp / 'fleetscope.db'}"
    # The collector's own rollup job would take the rollup lease and roll by its own clock
    # (every 30 s, 10 s settle), so what was rolled when a test looks would depend on timing.
    # The pipeline runs the job itself, once, when every device has crossed a minute boundary.
    collector = Collector(
        CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]), grace_s=2.0, rollups=False)
    )
    port = collector.start()
    address = f"127.0.0.1:{port}"
    fleet = build_fleet(
        collectors=[address],
        token=TOKEN,
        devices=6,
        state_dir=tmp / "sim",
        interval_s=1.0,
        jetson_share=0.5,
        gpus_per_server=2,
        classify=classify_event,
        name_prefix="t",
        latency=False,  # the tests' latency is the SDK traffic below, with known values
    )
    drones = [a.settings.name for a in fleet.agents[:3]]
    servers = [a.settings.name for a in fleet.agents[3:]]
    lost = _agent(
        address,
        tmp / "sim",
        "t-drone-lost",
        SimulatedSampler(kind="jetson", gpus=1, seed=41),
        {"simulated": "true", "site": "field", "fleet": "drones", "drone_id": "D041"},
    )
    hot = _agent(
        address,
        tmp / "sim",
        "t-drone-hot",
        HotSampler(kind="jetson", gpus=1, seed=42),
        {"simulated": "true", "site": "field", "fleet": "drones", "drone_id": "D042"},
    )
    fleet.start()
    lost.start()
    hot.start()
    pipe = Pipeline(
        url=url,
        collector=collector,
        fleet=fleet,
        extra=[lost, hot],
        drones=drones,
        servers=servers,
        lost="t-drone-lost",
        hot="t-drone-hot",
    )
    started = time.monotonic()
    try:
        wait_for(lambda: fleet.acked() >= 12 and lost.uplink.status.acked >= 3, 30, "first batches")
        # The drone flies out of range: its link goes first, so no word of a clean stop arrives
        # (that would make it "stopped", not offline).
        lost.uplink.stop()
        lost.stop()
        silent_since = time.monotonic()
        by_name = {a.settings.name: a for a in fleet.agents}
        rng = random.Random(7)
        drone_ms = [rng.uniform(24.0, 40.0) for _ in range(120)]  # ~30 inferences/s for 4 s
        server_ms = [rng.uniform(3.0, 6.0) for _ in range(800)]  # ~200 inferences/s
        _sdk_traffic(by_name[drones[0]], str(tmp / "sdk-drone.sock"), drone_ms, MemoryError(HOST_OOM_TEXT))
        _sdk_traffic(by_name[servers[0]], str(tmp / "sdk-server.sock"), server_ms, RuntimeError(OOM_LINE))
        pipe.latency_ms = {drones[0]: drone_ms, servers[0]: server_ms}
        _classified(by_name[servers[1]], XID_LINE, "critical", "kmsg")
        _classified(by_name[drones[0]], TRTEXEC_JETSON, "info", "/var/log/trtexec.log")
        _classified(by_name[servers[0]], TRTEXEC_SERVER, "info", "/var/log/trtexec.log")
        _classified(
            by_name[drones[1]],
            "camera pipeline restarted after a frame timeout",
            "warning",
            "/var/log/inference.log",
        )
        # Long enough that the lost drone counts as offline (a minute of silence), and that the
        # data crosses at least one minute boundary for the rollup job to close.
        wait_for(
            lambda: time.monotonic() - silent_since >= offline_after_s and time.monotonic() - started >= 62,
            offline_after_s + 70,
            "the lost drone to go quiet",
        )
        from fleetscope.collector.storage.engine import make_engine

        engine = make_engine(url)
        try:
            streaming = [*drones, *servers, "t-drone-hot"]
            wait_for(lambda: min(_stored_span_s(engine, streaming)) >= 63, 30, "a minute of stored data on every device")
            assert RollupJob(engine, settle_s=2.0).run_once().ran
            pipe.alerts = write_alerts(engine, pipe)
        finally:
            engine.dispose()
    except BaseException:
        pipe.stop()
        raise
    return pipe


def write_alerts(engine, pipe: Pipeline) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Alert rows as the alert job writes them, on the pipeline's real devices and incidents.

    * ``oom``: rule gpu-oom firing on the first server for its CUDA OOM incident, notified to
      "ops" after one failed attempt;
    * ``hot``: rule gpu-hot pending on the hot drone (88 °C, not yet for its 2 min);
    * ``offline``: rule agent-offline firing on the lost drone, held by a silence;
    * ``xid``: rule gpu-xid on the second server's Xid incident, fired and resolved (history);
    * ``old_hot``: rule gpu-hot on the hot drone three hours ago, resolved (history).
    """
    from sqlalchemy import insert, select
    from sqlalchemy.orm import Session

    from fleetscope.collector.storage.schema import (
        Device,
        Incident,
        alerts,
        notification_attempts,
        notifications,
        silences,
    )

    now = time.time_ns()
    out: dict[str, int] = {}
    with Session(engine) as s, s.begin():
        devices = {d.name: d for d in s.scalars(select(Device))}
        oom = s.scalars(select(Incident).where(Incident.kind == "cuda_oom").order_by(Incident.id)).first()
        xid = s.scalars(select(Incident).where(Incident.kind == "gpu_xid").order_by(Incident.id)).first()
        assert oom is not None and xid is not None, "the pipeline stored its OOM and Xid incidents"

        def alert(key: str, rule: str, device: str, **kw: object) -> int:
            d = devices[device]
            row = {
                "rule": rule,
                "fingerprint": f"{rule}:{device}:{key}",
                "device_id": d.id,
                "incident_id": None,
                "labels": {k: v for k, v in (d.labels or {}).items() if k != "simulated"},
                "facts": {},
                "firing_ns": None,
                "resolved_ns": None,
                "last_eval_ns": now,
                "silenced_by": None,
                **kw,
            }
            out[key] = int(s.execute(insert(alerts).values(**row).returning(alerts.c.id)).scalar_one())
            return out[key]

        def notify(alert_id: int, transition: str, at_ns: int, failures: int = 0) -> None:
            n = s.execute(
                insert(notifications)
                .values(
                    alert_id=alert_id,
                    transition=transition,
                    notifier="ops",
                    payload={"state": transition},
                    state="delivered",
                    attempts=failures + 1,
                    created_ns=at_ns,
                    next_attempt_ns=at_ns,
                    delivered_ns=at_ns + (failures * 2 + 1) * NS // 10,
                    last_error="",
                )
                .returning(notifications.c.id)
            ).scalar_one()
            for k in range(failures):
                s.execute(
                    insert(notification_attempts).values(
                        notification_id=n,
                        ts_ns=at_ns + k * 2 * NS // 10,
                        ok=False,
                        status=503,
                        error="503 Service Unavailable",
                        duration_ms=12.5,
                    )
                )
            s.execute(
                insert(notification_attempts).values(
                    notification_id=n,
                    ts_ns=at_ns + failures * 2 * NS // 10,
                    ok=True,
                    status=200,
                    error="",
                    duration_ms=4.2,
                )
            )

        oom_id = alert(
            "oom",
            "gpu-oom",
            pipe.servers[0],
            state="firing",
            incident_id=oom.id,
            kind="cuda_oom",
            severity="critical",
            summary=oom.title,
            facts={k: v for k, v in (oom.facts or {}).items() if k in ("requested_bytes", "batch_size")},
            pending_ns=oom.ts_ns,
            firing_ns=oom.ts_ns,
        )
        notify(oom_id, "firing", oom.ts_ns + NS, failures=1)
        alert(
            "hot",
            "gpu-hot",
            pipe.hot,
            state="pending",
            kind="metric",
            severity="warning",
            summary="gpu.temp_c 88 above 85 (for 2m)",
            labels={"site": "field", "fleet": "drones", "drone_id": "D042", "gpu": "0"},
            facts={"value": 88.0, "threshold": 85.0, "for_s": 120},
            pending_ns=now - 40 * NS,
        )
        silence = s.execute(
            insert(silences)
            .values(
                rule="agent-offline",
                device=pipe.lost,
                labels={},
                created_ns=now - 30 * NS,
                expires_ns=now + 2 * 3600 * NS,
                created_by="ops",
                comment="drone out of range",
            )
            .returning(silences.c.id)
        ).scalar_one()
        alert(
            "offline",
            "agent-offline",
            pipe.lost,
            state="firing",
            kind="absent",
            severity="error",
            summary=f"no data from {pipe.lost} for over 60 s",
            pending_ns=now - 50 * NS,
            firing_ns=now - 20 * NS,
            silenced_by=silence,
        )
        xid_id = alert(
            "xid",
            "gpu-xid",
            pipe.servers[1],
            state="resolved",
            incident_id=xid.id,
            kind="gpu_xid",
            severity="critical",
            summary=xid.title,
            pending_ns=xid.ts_ns,
            firing_ns=xid.ts_ns,
            resolved_ns=now - 10 * NS,
        )
        notify(xid_id, "firing", xid.ts_ns + NS)
        notify(xid_id, "resolved", now - 9 * NS)
        alert(
            "old_hot",
            "gpu-hot",
            pipe.hot,
            state="resolved",
            kind="metric",
            severity="warning",
            summary="gpu.temp_c 87 above 85 (for 2m)",
            pending_ns=now - 3 * 3600 * NS,
            firing_ns=now - 3 * 3600 * NS + 120 * NS,
            resolved_ns=now - 3 * 3600 * NS + 900 * NS,
        )
    return out
