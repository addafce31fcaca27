"""Ingest with TLS against the same ingest without it, alternated in one run.

    python benchmarks/bench_tls.py --rounds 3 --seconds 20 --agents 50

Each round runs ``bench_ingest.py ingest``'s load (N simulated agents streaming 1,125-row
batches as fast as their window lets them, from separate generator processes) twice against a
fresh collector on a fresh SQLite database: once plaintext, once with TLS (certificates from
``fleetscope.collector.commands.certs.init_certs``, as ``fleetscope certs init`` makes them). The order
alternates between rounds so drift in the machine's state favours neither. Prints each run's
stored rows per second (steady state, from database counts), the collector's CPU seconds per
million rows, and the medians.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402


def tls_generator(ca: str | None, *args: object) -> None:
    """``bench_ingest.generator_process`` whose channels are TLS channels trusting ``ca``."""
    if ca is not None:
        import grpc

        creds = grpc.ssl_channel_credentials(Path(ca).read_bytes())
        grpc.insecure_channel = lambda address, options=None: grpc.secure_channel(address, creds, options=options)  # type: ignore[assignment]
    bench_ingest.generator_process(*args)  # type: ignore[arg-type]


def one_run(tls: bool, args: argparse.Namespace, certs: Path) -> tuple[float, float]:
    """(stored rows/s, collector CPU s per million rows) of one run."""
    tmp = tempfile.TemporaryDirectory(prefix="fleetscope-bench-tls-")
    db_url = f"sqlite:///{tmp.name}/bench.db"
    address = f"127.0.0.1:{bench_ingest.free_port()}"
    flags = ["--tls-cert", str(certs / "collector.pem"), "--tls-key", str(certs / "collector.key")] if tls else []
    with open(Path(tmp.name) / "collector.log", "wb") as log:
        collector = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", address, "--db", db_url, "--no-rollups",
             "--no-detectors", *flags], stdout=log, stderr=subprocess.STDOUT,
            env={**__import__("os").environ, "FLEETSCOPE_TOKEN": bench_ingest.TOKEN},
        )
    bench_ingest.wait_for_port(address)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    per_proc = [args.agents // args.processes + (1 if i < args.agents % args.processes else 0) for i in range(args.processes)]
    ca = str(certs / "ca.pem") if tls else None
    procs = [ctx.Process(target=tls_generator, args=(ca, address, n, args.seconds, 8, 125, 4, out)) for n in per_proc if n]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    time.sleep(min(5.0, args.seconds / 4))
    start_rows, start_t = bench_ingest.count_rows(db_url), time.monotonic()
    cpu_start = bench_ingest._cpu_seconds(collector.pid)
    time.sleep(max(0.0, t0 + args.seconds - 1.0 - time.monotonic()))
    end_rows, end_t = bench_ingest.count_rows(db_url), time.monotonic()
    cpu = bench_ingest._cpu_seconds(collector.pid) - cpu_start
    totals = [out.get() for _ in procs]
    for p in procs:
        p.join()
    collector.terminate()
    collector.wait(60)
    errors = sum(int(t["errors"]) for t in totals)
    if errors:
        print(f"  warning: {errors} stream errors", file=sys.stderr)
    tmp.cleanup()
    rows = end_rows - start_rows
    return rows / (end_t - start_t), cpu / max(rows, 1) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--processes", type=int, default=2)
    args = p.parse_args()
    from fleetscope.collector.commands.certs import init_certs

    certs_dir = tempfile.TemporaryDirectory(prefix="fleetscope-bench-certs-")
    certs = Path(certs_dir.name)
    init_certs(certs)
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for tls in ((False, True) if r % 2 == 0 else (True, False)):
            rate, cpu = one_run(tls, args, certs)
            results[tls].append((rate, cpu))
            print(f"round {r + 1} {'TLS      ' if tls else 'plaintext'}: {rate:,.0f} rows/s stored, "
                  f"collector {cpu:.2f} CPU s per million rows", flush=True)
    plain = statistics.median(x[0] for x in results[False])
    secure = statistics.median(x[0] for x in results[True])
    print(f"median: plaintext {plain:,.0f} rows/s, TLS {secure:,.0f} rows/s ({secure / plain - 1:+.1%}); "
          f"collector CPU per million rows: plaintext {statistics.median(x[1] for x in results[False]):.2f} s, "
          f"TLS {statistics.median(x[1] for x in results[True]):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
