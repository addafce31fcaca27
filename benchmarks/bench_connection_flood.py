"""The collector's memory after a connection flood: a leak, or the allocator keeping what was freed?

    python benchmarks/bench_connection_flood.py [--idle 500] [--raw 500] [--stuck 50] [--settle 15] [--mode default]

Starts a real ``fleetscope collector`` process (SQLite, short handshake/idle/keepalive timeouts so
the flood is closed within seconds), reads its RSS, then floods it: ``--idle`` clients that speak
HTTP/2 and then say nothing, ``--raw`` that connect and send nothing, and ``--stuck`` that open
Ingest/Stream, announce an 8 MiB batch, send 6 MiB of it and stop (their buffers are the
flood's memory). All are closed by the collector (timeouts, unanswered keepalives); the RSS is
read ``--settle`` seconds after the last one closed, then again after the process is told to
call glibc's ``malloc_trim(0)`` (SIGUSR1, installed by this benchmark's launcher, not by the
collector). ``--mode``:

* ``default``: the collector as shipped;
* ``arena2``: ``MALLOC_ARENA_MAX=2`` in its environment (fewer glibc arenas to strand memory in);
* ``tracemalloc``: Python's own allocations traced; the launcher prints them on SIGUSR1.

Memory that malloc_trim gives back was free inside the allocator, not leaked; what stays after
it, and grows from flood to flood, would be a leak. Figures in docs/reliability.md ("Hostile input, second round").
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import free_port, wait_until  # noqa: E402
from tests.e2e.test_connection_flood import (  # noqa: E402
    PREFACE,
    SETTINGS,
    _closed_by_peer,
    _frame,
    _rss_bytes,
    _stall_mid_batch,
)

TOKEN = "bench-token"
LAUNCHER = """
import ctypes, signal, sys, tracemalloc
libc = ctypes.CDLL("libc.so.6")
if "--tracemalloc" in sys.argv:
    sys.argv.remove("--tracemalloc")
    tracemalloc.start()

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) >> 10

def on_usr1(*_):
    before = rss_mib()
    libc.malloc_trim(0)
    traced = ""
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        traced = f", Python objects {current >> 20} MiB (peak {peak >> 20} MiB)"
    print(f"bench: malloc_trim: RSS {before} -> {rss_mib()} MiB{traced}", flush=True)

signal.signal(signal.SIGUSR1, on_usr1)
from fleetscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    port = free_port()
    log_path = tmp / "collector.log"
    env = dict(os.environ)
    extra = []
    if args.mode == "arena2":
        env["MALLOC_ARENA_MAX"] = "2"
    if args.mode == "tracemalloc":
        extra.append("--tracemalloc")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, *extra, "collector", "--listen", f"127.0.0.1:{port}", "--db",
             f"sqlite:///{tmp / 'fleet.db'}", "--token", TOKEN, "--grace", "2s", "--handshake-timeout", "3s",
             "--idle-timeout", "3s", "--keepalive-time", "2s", "--keepalive-timeout", "2s", "--max-batch-size", "8MiB",
             *args.collector_args],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    try:
        wait_until(lambda: "collector listening" in log_path.read_text(), timeout_s=60, message="collector listening")
        time.sleep(2.0)
        start = _rss_bytes(proc.pid)
        mib = 1 << 20
        results = []
        for _ in range(args.floods):
            results.append(_flood(args, proc, port, log_path) | {"start": start / mib})
        return results
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _flood(args: argparse.Namespace, proc: subprocess.Popen, port: int, log_path: Path) -> dict[str, float]:
    """One flood, closed; the RSS at its peak, ``--settle`` s after it closed, and after a malloc_trim."""
    t0 = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(args.idle)]
    for s in idle:
        s.sendall(PREFACE + _frame(SETTINGS, 0, 0))
    raw = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(args.raw)]
    stuck = [_stall_mid_batch(port, message_bytes=8 << 20, send_bytes=6 << 20) for _ in range(args.stuck)]
    peak = _rss_bytes(proc.pid)
    flood_s = time.monotonic() - t0
    _closed_by_peer(idle + raw + stuck, timeout_s=120)
    for s in idle + raw + stuck:
        s.close()
    closed_s = time.monotonic() - t0
    time.sleep(args.settle)
    settled = _rss_bytes(proc.pid)
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    trimmed = _rss_bytes(proc.pid)
    assert proc.poll() is None, log_path.read_text()[-2000:]
    print("   ", [line for line in log_path.read_text().splitlines() if line.startswith("bench:")][-1])
    mib = 1 << 20
    return {"peak": peak / mib, "settled": settled / mib, "trimmed": trimmed / mib, "flood_s": flood_s,
            "closed_s": closed_s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--idle", type=int, default=500)
    p.add_argument("--raw", type=int, default=500)
    p.add_argument("--stuck", type=int, default=50)
    p.add_argument("--settle", type=float, default=15.0, help="seconds after the last connection closed")
    p.add_argument("--mode", choices=["default", "arena2", "tracemalloc"], default="default")
    p.add_argument("--runs", type=int, default=1, help="collector processes, one after another")
    p.add_argument("--floods", type=int, default=1, help="floods per collector (a leak grows from one to the next)")
    p.add_argument("collector_args", nargs="*", help="more collector flags (after --)")
    args = p.parse_args()
    for i in range(args.runs):
        for k, r in enumerate(run(args)):
            print(f"run {i + 1} flood {k + 1} ({args.mode}): RSS start {r['start']:.0f} MiB, peak {r['peak']:.0f}, "
                  f"{args.settle:.0f} s after the flood closed {r['settled']:.0f} (+{r['settled'] - r['start']:.0f}), "
                  f"after malloc_trim {r['trimmed']:.0f} (+{r['trimmed'] - r['start']:.0f}); flood sent in {r['flood_s']:.1f} s, "
                  f"closed by {r['closed_s']:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
