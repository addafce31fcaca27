"""Fresh before old on a thin link: how long an OOM written after a drone reconnects takes to be a
stored incident while its backlog drains through a slow link, in the order before (FIFO) and
now (incidents and logs first), with and without ``--uplink-rate``; and the rate an agent keeps
for each ``--uplink-rate`` asked, measured on the socket.

    python benchmarks/bench_thin_link.py                       # 32 kbit/s link, 300 s of Jetson backlog
    python benchmarks/bench_thin_link.py --link 64kbit/s --backlog-s 600 --repeats 3
    # 48 h out of coverage, paced at 30 kbit/s, the backlog drained whole and checked:
    python benchmarks/bench_thin_link.py --backlog-s 172800 --orders priority --pacing paced \
        --repeats 1 --drain --rates 32kbit/s

Everything is real and on loopback: a collector process on SQLite, a TCP proxy that carries
``--link`` bytes a second each way (``tests/tcp_proxy.py``), an agent with a simulated Jetson
sampler following a log file, and a backlog spooled by the same agent code over ``--backlog-s``
seconds of past time (a batch each ``--backlog-batch-s``, as an agent out of reach seals them). The OOM line is written once the backlog is draining;
the time is from the write to the incident's row in the database. FIFO runs wait for the
backlog to drain first, so they take about its size over the link's rate. ``--drain`` then keeps
the link at its rate until the whole backlog is in (printing progress) and checks it arrived
exactly once: every batch claimed once, every sample and log row of it readable once. The rate figures run
``fleetscope agent --uplink-rate RATE`` as a process through an unlimited proxy that counts the
bytes (TLS off) over ``--rate-seconds``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetscope.cli.args import rate_bytes_per_s  # noqa: E402
from tests.conftest import CollectorProcess, free_port, wait_until  # noqa: E402
from tests.e2e.test_thin_link import (  # noqa: E402
    OOM,
    Backlog,
    backlog_batches_stored,
    backlog_stored,
    cuda_ooms_stored,
    live_agent,
    spool_backlog,
)
from tests.tcp_proxy import TcpProxy  # noqa: E402


def oom_latency(work: Path, *, order: str, link: float, pace: float, backlog_s: int, batch_s: int, timeout_s: float,
                drain: bool) -> tuple[float, int, int]:
    """Seconds from the OOM line to its stored incident; backlog batches stored then, and in all."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db_url = f"sqlite:///{work / 'fleetscope.db'}"
    made = time.monotonic()
    backlog = spool_backlog(work / "spool", backlog_s, batch_s=batch_s)
    print(f"  backlog: {backlog.batches} batches, {backlog.sample_rows} sample rows, {backlog.log_rows} log lines, "
          f"{backlog.bytes / 1e6:.2f} MB in the spool (spooled in {time.monotonic() - made:.0f} s)", flush=True)
    collector = CollectorProcess(db_url, free_port(), "test-token", work / "collector.log").start()
    proxy = TcpProxy(("127.0.0.1", collector.port), rate_up=link, rate_down=link).start()
    log_file = work / "inference.log"
    log_file.write_text("")
    agent = live_agent(work / "spool", proxy.address, log_file, rate=pace)
    agent.uplink.drain_order = order
    agent.start()
    try:
        wait_until(lambda: backlog_batches_stored(db_url, backlog) >= 10, timeout_s=60, message="the backlog draining")
        with open(log_file, "a") as f:
            f.write(OOM)
        written = time.monotonic()
        wait_until(lambda: cuda_ooms_stored(db_url) >= 1, timeout_s=timeout_s, interval_s=0.05, message="the OOM stored")
        took = time.monotonic() - written
        stored_then = backlog_batches_stored(db_url, backlog)
        if drain:
            print(f"  OOM stored {took:.2f} s after it was written; {stored_then}/{backlog.batches} backlog batches in",
                  flush=True)
            drain_whole(db_url, backlog, link)
        return took, stored_then, backlog.batches
    finally:
        agent.stop(timeout_s=5)
        proxy.stop()
        collector.stop()


def drain_whole(db_url: str, backlog: Backlog, link: float) -> None:
    """Wait for the whole backlog at the link's rate, printing progress; then check it landed once."""
    began = time.monotonic()
    deadline = began + 2 * backlog.bytes / link + 300
    last_print = 0.0
    while (stored := backlog_batches_stored(db_url, backlog)) < backlog.batches:
        if time.monotonic() > deadline:
            raise SystemExit(f"the backlog did not drain: {stored}/{backlog.batches} batches after "
                             f"{time.monotonic() - began:.0f} s")
        if time.monotonic() - last_print >= 60:
            last_print = time.monotonic()
            print(f"  draining: {stored}/{backlog.batches} batches after {last_print - began:.0f} s", flush=True)
        time.sleep(2.0)
    took = time.monotonic() - began
    got = backlog_stored(db_url, backlog)
    once = (got.batches, got.claimed_rows, got.sample_rows, got.log_rows) == (
        backlog.batches, backlog.sample_rows, backlog.sample_rows, backlog.log_rows)
    print(f"  drained in {took:.0f} s ({backlog.bytes / took:.0f} B/s of spooled bytes): {got.batches} batches claimed, "
          f"{got.sample_rows} sample rows and {got.log_rows} log lines readable, of {backlog.batches}, "
          f"{backlog.sample_rows} and {backlog.log_rows} spooled: {'exactly once' if once else 'NOT EXACTLY ONCE'}",
          flush=True)
    if not once:
        raise SystemExit("the backlog did not land exactly once")


def achieved_rate(work: Path, *, asked: str, seconds: float) -> float:
    """Bytes a second on the socket of ``fleetscope agent --uplink-rate asked`` draining a backlog."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db_url = f"sqlite:///{work / 'fleetscope.db'}"
    rate = rate_bytes_per_s(asked)
    backlog_s = int(max(60, (seconds + 10) * rate / 700))  # a Jetson batch a second is about 800 bytes
    spool_backlog(work / "spool", backlog_s)
    collector = CollectorProcess(db_url, free_port(), "test-token", work / "collector.log").start()
    proxy = TcpProxy(("127.0.0.1", collector.port)).start()
    with open(work / "agent.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.cli", "agent", "--collector", proxy.address, "--token", "test-token",
             "--spool", str(work / "spool"), "--name", "drone-1", "--no-gpu", "--no-kernel-log", "--interval", "1s",
             "--uplink-rate", asked],
            stdout=subprocess.DEVNULL, stderr=log,
        )
    try:
        wait_until(lambda: proxy.bytes_up > 2 * rate, timeout_s=30, message="the agent streaming")
        time.sleep(1.0)
        b0, t0 = proxy.bytes_up, time.monotonic()
        time.sleep(seconds)
        return (proxy.bytes_up - b0) / (time.monotonic() - t0)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        proxy.stop()
        collector.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--link", type=rate_bytes_per_s, default=4000.0, metavar="RATE",
                   help="the link's rate each way, e.g. 32kbit/s (the default)")
    p.add_argument("--uplink-rate", default="30kbit/s", metavar="RATE",
                   help="the agent's --uplink-rate in the paced runs (default %(default)s: a little below the link)")
    p.add_argument("--backlog-s", type=int, default=300, help="seconds of Jetson backlog in the spool (default %(default)s)")
    p.add_argument("--backlog-batch-s", type=int, default=60,
                   help="seconds a spooled batch holds (default %(default)s: a Jetson agent's batch interval)")
    p.add_argument("--pacing", choices=("both", "none", "paced"), default="both",
                   help="time the agent without --uplink-rate, with it, or both (the default)")
    p.add_argument("--drain", action="store_true",
                   help="after each OOM, wait for the whole backlog at the link's rate and check it landed exactly once")
    p.add_argument("--repeats", type=int, default=2, help="OOMs timed per configuration (default %(default)s)")
    p.add_argument("--orders", default="fifo,priority", help="drain orders to time (default %(default)s)")
    p.add_argument("--rates", default="32kbit/s,128kbit/s", help="--uplink-rate values to measure (default %(default)s)")
    p.add_argument("--rate-seconds", type=float, default=10.0, help="how long each rate is measured (default %(default)s)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="give up on an OOM after this long (default %(default)s)")
    args = p.parse_args(argv)
    try:
        pace = rate_bytes_per_s(args.uplink_rate)
        rates = [r.strip() for r in args.rates.split(",") if r.strip()]
        for r in rates:
            rate_bytes_per_s(r)
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    if any(o not in ("fifo", "priority") for o in orders) or args.repeats < 1 or args.backlog_s < 60:
        p.error("--orders takes fifo and/or priority; --repeats at least 1; --backlog-s at least 60")
    if not 1 <= args.backlog_batch_s <= args.backlog_s:
        p.error("--backlog-batch-s is at least 1 and at most --backlog-s")

    work = Path(tempfile.mkdtemp(prefix="fleetscope-thin-link-"))
    try:
        print(f"link {args.link:.0f} B/s each way; backlog {args.backlog_s} s of a simulated Jetson")
        print(f"{'order':9} {'--uplink-rate':14} {'OOM -> stored incident (s)':28} backlog batches stored by then")
        for order in orders:
            pacings = {"none": [(0.0, "none")], "paced": [(pace, args.uplink_rate)]}.get(
                args.pacing, [(0.0, "none"), (pace, args.uplink_rate)])
            for paced, label in pacings:
                runs = [oom_latency(work / "run", order=order, link=args.link, pace=paced, backlog_s=args.backlog_s,
                                    batch_s=args.backlog_batch_s, timeout_s=args.timeout_s, drain=args.drain)
                        for _ in range(args.repeats)]
                took = [r[0] for r in runs]
                stored = ", ".join(f"{r[1]}/{r[2]}" for r in runs)
                print(f"{order:9} {label:14} {statistics.median(took):6.2f} median ({', '.join(f'{t:.2f}' for t in took)})"
                      f"   {stored}", flush=True)
        print(f"\nachieved rate on the socket over {args.rate_seconds:g} s (payload, framing, HTTP/2 control; TLS off)")
        for asked in rates:
            want = rate_bytes_per_s(asked)
            got = achieved_rate(work / "rate", asked=asked, seconds=args.rate_seconds)
            print(f"--uplink-rate {asked:12} asked {want:8.0f} B/s  measured {got:8.0f} B/s  ({(got / want - 1) * 100:+.1f} %)",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
