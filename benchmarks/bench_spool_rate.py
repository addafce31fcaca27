"""How fast a device's spool fills while its collector is unreachable: bytes an hour, so a
spool size (``fleetscope agent --spool-max-size``) reads as hours of outage it absorbs.

    python benchmarks/bench_spool_rate.py                         # an 8-GPU server, a batch every 5 s, 1 h
    python benchmarks/bench_spool_rate.py --kind jetson --gpus 1 --batch-interval 1

A real ``Agent`` (the simulated device's sampler, batcher, on-disk spool) ticks through
``--seconds`` of simulated time as fast as it can with no collector, so every batch stays in
the spool; it prints the spool's bytes on disk (database and WAL) and their rate an hour.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("server", "jetson"), default="server", help="simulated device (default %(default)s)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of a simulated server (default %(default)s)")
    p.add_argument("--batch-interval", type=int, default=5, help="seconds between batches (default %(default)s)")
    p.add_argument("--seconds", type=int, default=3600, help="simulated seconds at 1 Hz (default %(default)s)")
    args = p.parse_args(argv)
    if args.gpus < 1 or args.batch_interval < 1 or args.seconds < 60:
        p.error("--gpus and --batch-interval must be at least 1, --seconds at least 60")

    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.tools.simulate import SimulatedSampler
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    work = Path(tempfile.mkdtemp(prefix="fleetscope-spool-rate-"))
    try:
        sampler = SimulatedSampler(kind=args.kind, gpus=args.gpus, seed=1, latency=False)
        t0 = time.time_ns()
        now = [t0]
        agent = Agent(
            AgentSettings(collectors=("127.0.0.1:1",), spool_dir=work, token="x", name="spool-rate",
                          batch_interval_s=args.batch_interval, spool_max_bytes=8 << 30),
            samplers=[sampler],
            inventory=sampler.inventory_message(),
            kind=pb.DEVICE_KIND_JETSON if args.kind == "jetson" else pb.DEVICE_KIND_SERVER,
            clock=lambda: now[0],
            mono_clock=lambda: now[0] - t0 + 10**12,
        )
        for s in range(args.seconds):
            now[0] = t0 + s * 10**9
            agent.tick(now[0])
            if s % args.batch_interval == args.batch_interval - 1:
                agent.flush(now[0])
            if s % 600 == 599:
                print(f"  {s + 1}/{args.seconds} simulated seconds", file=sys.stderr, flush=True)
        size = agent.spool.disk_bytes()
        batches = agent.spool.stats().batches
        agent.spool.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gpus = args.gpus if args.kind == "server" else 1
    print(f"{args.kind}, {gpus} GPU(s), a batch every {args.batch_interval} s: {batches} batches, "
          f"{size / 1e6:.2f} MB for {args.seconds} s -> {size / args.seconds * 3600 / 1e6:.1f} MB an hour; "
          f"a 256 MiB spool holds {(256 << 20) / (size / args.seconds) / 3600:.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
