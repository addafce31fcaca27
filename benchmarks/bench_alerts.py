"""From an OOM line written on a device to the webhook call: p50/p99 over N trials.

    python benchmarks/bench_alerts.py --trials 20                    # agent at its defaults (1 s)
    python benchmarks/bench_alerts.py --trials 20 --agent-interval 200ms
    python benchmarks/bench_alerts.py --trials 20 --pg postgresql://postgres@127.0.0.1:5432/test

Real processes: a collector (``--alerts`` with one webhook rule on cuda_oom), an agent that
follows a log file, and a webhook receiver in this process on loopback. Each trial appends a
PyTorch OOM traceback to the log and times until the receiver gets the "firing" POST; then
the benchmark resolves the incident in the database (the quiet period's job, shortened) and
waits for the "resolved" POST, so the next OOM opens a new incident and a new alert.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, func, select, update  # noqa: E402

from fleetscope.collector.storage.engine import normalise_url  # noqa: E402
from fleetscope.collector.storage.schema import Incident  # noqa: E402
from tests.alert_receiver import Receiver  # noqa: E402
from tests.conftest import CollectorProcess, free_port, wait_until  # noqa: E402

CLI = [sys.executable, "-m", "fleetscope.cli"]
OOM = (
    "Traceback (most recent call last):\n"
    '  File "/opt/train/train.py", line 88, in <module>\n'
    "    loss = model(batch).sum()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.25 GiB is free.\n"
)

ONE_LINE = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; "
            "77.89 GiB already allocated; 1.25 GiB free; 78.40 GiB reserved in total by PyTorch)\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--agent-interval", default="1s", help="the agent's --interval (default 1s, its default)")
    ap.add_argument("--single-line", action="store_true",
                    help="write a one-line CUDA OOM error instead of a traceback (which the agent holds up to 2 s for a chained one)")
    ap.add_argument("--pg", metavar="ADMIN_URL",
                    help="run on PostgreSQL: a fresh database made (and dropped) through this server's admin URL "
                    "(default: a SQLite file in a temp dir)")
    args = ap.parse_args()
    receiver = Receiver()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        db = f"sqlite:///{tmp / 'bench.db'}"
        admin = None
        if args.pg:
            import secrets

            import psycopg

            admin = psycopg.connect(args.pg, autocommit=True)
            name = "fleetscope_bench_" + secrets.token_hex(4)
            admin.execute(f'CREATE DATABASE "{name}"')
            db = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
        rules = tmp / "rules.toml"
        rules.write_text(f'[[notifier]]\nname = "ops"\ntype = "webhook"\nurl = "{receiver.url()}"\n\n'
                         '[[rule]]\nname = "gpu-oom"\nincident = ["cuda_oom"]\nnotify = ["ops"]\n')
        collector = CollectorProcess(db, free_port(), "bench", tmp / "collector.log", ("--alerts", str(rules))).start()
        log = tmp / "train.log"
        log.touch()
        with open(tmp / "agent.log", "ab") as out:
            agent = subprocess.Popen([*CLI, "agent", "--collector", collector.address, "--token", "bench", "--name", "drone-1",
                                      "--spool", str(tmp / "spool"), "--interval", args.agent_interval,
                                      "--log-file", str(log), "--no-kernel-log", "--no-gpu"], stdout=out, stderr=subprocess.STDOUT)
        engine = create_engine(normalise_url(db))
        latencies: list[float] = []
        stored_to_hook: list[float] = []
        wall_offset = time.time() - time.monotonic()
        try:
            time.sleep(3.0)
            for _ in range(args.trials):
                before = len(receiver.received)
                with open(log, "a") as f:
                    f.write(ONE_LINE if args.single_line else OOM)
                    f.flush()
                    written = time.monotonic()
                wait_until(lambda b=before: len(receiver.received) > b, timeout_s=30, interval_s=0.005, message="firing")
                at, _, body, _ = receiver.received[before]
                assert body["state"] == "firing"
                latencies.append(at - written)
                with engine.connect() as c:
                    received_ns = c.execute(select(func.max(Incident.__table__.c.received_ns))).scalar_one()
                stored_to_hook.append(at + wall_offset - received_ns / 1e9)
                with engine.begin() as c:
                    c.execute(update(Incident.__table__).where(Incident.__table__.c.state == "open").values(
                        state="resolved", ended_ns=time.time_ns()))
                wait_until(lambda b=before: len(receiver.received) > b + 1, timeout_s=30, message="resolved")
                time.sleep(0.3 + (len(latencies) % 5) * 0.17)  # spread the writes over the agent's tick
        finally:
            agent.terminate()
            agent.wait(30)
            collector.terminate()
            engine.dispose()
            receiver.stop()
            if admin is not None:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    print(f"OOM {'line' if args.single_line else 'traceback'} -> webhook, {len(latencies)} trials, agent interval {args.agent_interval}, "
          f"{db.split(':', 1)[0]}: p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
          f"max {latencies[-1] * 1000:.0f} ms")
    stored_to_hook.sort()
    print(f"  of which incident received by the collector -> webhook: p50 {statistics.median(stored_to_hook) * 1000:.0f} ms, "
          f"p99 {stored_to_hook[min(len(stored_to_hook) - 1, round(0.99 * (len(stored_to_hook) - 1)))] * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
