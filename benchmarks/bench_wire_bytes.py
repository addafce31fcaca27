"""What one device costs its link and its spool: bytes a reading and a device-hour, plain (every
batch a second, each reading an 8-byte double in protobuf, as agents sent them before compact-v1)
against compact-v1 (``fleetscope.proto.compact``, a batch every ``--batch-interval``), side by
side in one run.

    python benchmarks/bench_wire_bytes.py                      # a Jetson drone and an 8-GPU server, 1 h at 1 s
    python benchmarks/bench_wire_bytes.py --seconds 600 --batch-interval 30

For each device and form, a real ``Agent`` (the simulated device's sampler, batcher and on-disk
spool) ticks through ``--seconds`` of simulated time at 1 Hz with no collector reachable, so
every batch stays in the spool: its database's pages in use are the spool figure (the WAL is a
fixed share of the bound, not a rate), and the days a ``--spool-max-size-mib`` spool holds
follow from it. Then its uplink streams the
spool to a real collector (a subprocess on SQLite) through a loopback forwarder that counts the
bytes the agent's socket sends (TLS off): the wire figure, gRPC and HTTP/2 framing included.
"Plain" is the same agent with its batches left in the plain form and one batch a second, which is
what the agent spooled and sent until now. Compact is measured twice, with batches cut as the
agent's loop cuts them while a collector listens ("live": logs leave every tick, the wire figure)
and while out of reach ("outage": logs wait for the readings, the spool figure).

A reading is one value a user can chart: a Column value that is not null, a per-core figure, a
process table cell, a metric point. Timestamps, indexes and names are overhead, counted in the
bytes and not in the readings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.tcp_proxy import TcpProxy  # noqa: E402 - the tests' loopback forwarder, which counts bytes

NS = 10**9


def _readings(batch) -> int:  # type: ignore[no-untyped-def]
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    def count(msg) -> int:  # type: ignore[no-untyped-def]
        total = 0
        for field, value in msg.ListFields():
            if field.message_type is pb.Column.DESCRIPTOR:
                total += len(value.values) - len(value.null_rows)
            elif field.type == field.TYPE_MESSAGE and not field.is_repeated:
                total += count(value)
            elif field.type in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
                total += len(value)
        return total

    return count(batch.host) + count(batch.gpu) + len(batch.metrics)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(kind: str, gpus: int, form: str, seconds: int, batch_interval: int, work: Path, progress: bool,
            connected: bool = True) -> dict:
    """One device and form. ``connected``: batches are cut as the agent's loop cuts them while a
    collector listens (logs every tick); False: as while out of reach (logs wait for the
    readings' batch)."""
    from fleetscope.agent.daemon import runner
    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.tools.simulate import SimulatedSampler
    from fleetscope.proto import compact as compact_codec
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    plain = form == "plain"
    encode_s = [0.0]

    def timed_compact(batch):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        out = compact_codec.compact(batch)
        encode_s[0] += time.perf_counter() - started
        return out

    # Plain: what the agent spooled before compact-v1 (the batch as built); compact: as it does now.
    runner.compact = (lambda batch: batch) if plain else timed_compact  # type: ignore[attr-defined]
    label = form if plain else f"{form}-{'live' if connected else 'outage'}"
    state = work / f"{kind}-{label}"
    db = work / f"{kind}-{label}.db"
    sampler = SimulatedSampler(kind=kind, gpus=gpus, seed=1, latency=False)
    t0 = time.time_ns() - (seconds + 60) * NS
    interval = 1 if plain else batch_interval
    agent = Agent(
        AgentSettings(collectors=("127.0.0.1:1",), spool_dir=state, token="bench", name=f"{kind}-{form}",
                      batch_interval_s=interval, spool_max_bytes=8 << 30, device_key=False),
        samplers=[sampler], inventory=sampler.inventory_message(),
        kind=pb.DEVICE_KIND_JETSON if kind == "jetson" else pb.DEVICE_KIND_SERVER,
    )
    for s in range(seconds):
        agent.tick(t0 + s * NS)
        seal = s % interval == interval - 1
        if seal or connected:  # what Agent.run does each tick
            agent.flush(t0 + s * NS, samples=seal)
        if progress and s % 600 == 599:
            print(f"  {kind} {label}: {s + 1}/{seconds} simulated seconds", file=sys.stderr, flush=True)
    agent.flush(t0 + seconds * NS)
    spooled = agent.spool.after(0, 10**7)
    readings = 0
    for b in spooled:
        batch = pb.Batch.FromString(b.payload)
        readings += _readings(compact_codec.expand(batch))
    # What counts against --spool-max-size as hours pass: the database's pages in use. The WAL
    # and its index are a fixed share of the bound (spool.wal_limit), not a rate.
    spool_bytes = agent.spool._db_bytes_in_use()
    wal_bytes = agent.spool.disk_bytes() - os.path.getsize(agent.spool.path)
    batches = len(spooled)

    port = _free_port()
    log = open(work / f"collector-{kind}-{form}.log", "wb")  # noqa: SIM115 - the child keeps it
    collector = subprocess.Popen(
        [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"127.0.0.1:{port}", "--db", f"sqlite:///{db}",
         "--token", "bench", "--metrics-listen", "off"], stdout=log, stderr=subprocess.STDOUT)
    forwarder = TcpProxy(("127.0.0.1", port)).start()
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            if time.monotonic() > deadline or collector.poll() is not None:
                raise SystemExit(f"the collector did not start: see {log.name}")
            time.sleep(0.1)
        agent.uplink._addresses = [f"127.0.0.1:{forwarder.port}"]
        agent.uplink.start()
        if not agent.uplink.drain(600):
            raise SystemExit(f"{kind} {form}: the spool did not drain within 600 s ({agent.uplink.status})")
        wire = forwarder.bytes_up
        sent_compact = agent.uplink.status.collector_compact
    finally:
        agent.uplink.stop()
        agent.spool.close()
        forwarder.stop()
        collector.terminate()
        collector.wait(30)
        log.close()
    hours = seconds / 3600
    return {
        "kind": kind, "form": label, "batch_s": interval, "batches": batches, "readings": readings,
        "spool_bytes": spool_bytes, "wire_bytes": wire, "spool_per_reading": spool_bytes / readings,
        "wire_per_reading": wire / readings, "spool_per_hour": spool_bytes / hours, "wire_per_hour": wire / hours,
        "encode_ms_per_device_s": 1000 * encode_s[0] / seconds, "wire_compact": sent_compact, "wal_bytes": wal_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=3600, help="simulated seconds at 1 Hz per device (default %(default)s)")
    p.add_argument("--batch-interval", type=int, default=None,
                   help="compact: seconds of readings a batch (default: the agent's, 60 on a Jetson and 10 on a server)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the server (default %(default)s)")
    p.add_argument("--spool-max-size-mib", type=int, default=256, help="for the days a spool holds (default %(default)s)")
    args = p.parse_args(argv)
    if args.seconds < 60 or (args.batch_interval is not None and args.batch_interval < 1) or args.gpus < 1:
        p.error("--seconds must be at least 60, --batch-interval and --gpus at least 1")
    work = Path(tempfile.mkdtemp(prefix="fleetscope-wire-bytes-"))
    os.environ.setdefault("FLEETSCOPE_LOG_LEVEL", "warning")
    try:
        results = []
        from fleetscope.agent.cli import default_batch_interval_s
        from fleetscope.proto.v1 import telemetry_pb2 as pb

        for kind, gpus in (("jetson", 1), ("server", args.gpus)):
            interval = args.batch_interval or int(default_batch_interval_s(
                pb.DEVICE_KIND_JETSON if kind == "jetson" else pb.DEVICE_KIND_SERVER))
            results.append(measure(kind, gpus, "plain", args.seconds, interval, work, progress=True))
            for connected in (True, False):
                results.append(measure(kind, gpus, "compact", args.seconds, interval, work, progress=True,
                                       connected=connected))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.seconds} simulated s at 1 Hz; plain: a batch a second; compact: a batch every 'batch s'")
    print(f"{'device':8} {'form':15} {'batch s':>7} {'readings':>9} {'wire B/reading':>15} {'spool B/reading':>16} {'wire MB/h':>10} "
          f"{'spool MB/h':>11} {'spool holds':>13} {'encode ms/dev-s':>16}")
    for r in results:
        from fleetscope.agent.daemon.spool import _SHM_ALLOWANCE, wal_limit_for

        bound = args.spool_max_size_mib * 2**20
        days = (bound - wal_limit_for(bound) - _SHM_ALLOWANCE) / r["spool_per_hour"] / 24
        print(f"{r['kind']:8} {r['form']:15} {r['batch_s']:7d} {r['readings']:9d} {r['wire_per_reading']:15.2f} {r['spool_per_reading']:16.2f} "
              f"{r['wire_per_hour'] / 1e6:10.3f} {r['spool_per_hour'] / 1e6:11.3f} {days:10.1f} d {r['encode_ms_per_device_s']:16.3f}")
    for kind in ("jetson", "server"):
        before, live, outage = (r for r in results if r["kind"] == kind)
        print(f"{kind}: wire {before['wire_per_reading'] / live['wire_per_reading']:.1f}x smaller (live), "
              f"spool {before['spool_per_reading'] / outage['spool_per_reading']:.1f}x smaller (outage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
