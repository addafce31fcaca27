"""``fleetscope collector``: receive agents' streams over gRPC and store them exactly once in SQL,
with the jobs (rollups, compaction, retention, detectors, alerts) a collector runs; ``--workers N``
runs N such processes on one port."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from fleetscope.cli.args import duration_ns, listen_address, size_bytes, whole_number_at_least
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import DEFAULT_DB, needs_collector


def register(sub: Any) -> None:
    p = sub.add_parser("collector", help="run a collector: gRPC ingest into SQLite or PostgreSQL",
                       description="Receive agents' streams over gRPC and store them exactly once in SQL.")
    p.add_argument("--listen", type=_listen_arg, default=os.environ.get("FLEETSCOPE_LISTEN", "127.0.0.1:4317"), metavar="HOST:PORT",
                   help="address to listen on (env FLEETSCOPE_LISTEN; default %(default)s; 0.0.0.0:4317 for all interfaces)")
    p.add_argument("--db", default=DEFAULT_DB, metavar="URL", help="database URL (env FLEETSCOPE_DB; default %(default)s)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token", default=os.environ.get("FLEETSCOPE_TOKEN"), help="the token agents must present (env FLEETSCOPE_TOKEN)")
    auth.add_argument("--tokens-file", type=Path, metavar="FILE", help="file with one accepted token per line")
    p.add_argument("--max-batch-size", type=size_bytes, default=32 << 20, metavar="SIZE", help="largest batch accepted (default 32MiB)")
    p.add_argument("--grace", type=duration_ns, default=10 * 10**9, metavar="DURATION",
                   help="on stop, how long in-flight streams get to finish (default 10s)")
    p.add_argument("--no-rollups", action="store_true",
                   help="do not maintain the minute/hour rollups the dashboard reads (another collector does)")
    p.add_argument("--no-db-upgrade", action="store_true",
                   help="refuse to start on a database at an older schema instead of upgrading it ('fleetscope db upgrade' does)")
    compaction = p.add_mutually_exclusive_group()
    compaction.add_argument("--fold-after", type=duration_ns, default=3600 * 10**9, metavar="DURATION",
                            help="fold raw samples older than this (and already rolled up) into compressed chunks, "
                                 "an hour per GPU (default 1h). One collector at a time does it")
    compaction.add_argument("--no-compaction", action="store_true",
                            help="keep raw samples uncompressed here (another collector may still fold them)")
    retention = p.add_mutually_exclusive_group()
    retention.add_argument("--retention", type=_retention_arg, metavar="TIER=DURATION,...",
                           help="how long each tier is kept, e.g. raw=7d,minute=90d,hour=2y,day=5y,incidents=2y,logs=30d,alerts=1y "
                                "(the defaults; any subset; 'off' keeps a tier for ever). One collector at a time enforces it")
    retention.add_argument("--no-retention", action="store_true", help="delete nothing, ever (another collector may still)")
    p.add_argument("--no-detectors", action="store_true",
                   help="do not run the detectors (agent offline, latency SLO and regression, throttling, starved GPU, "
                        "memory growth, repeated OOM) here; another collector does")
    p.add_argument("--offline-after", type=duration_ns, metavar="DURATION",
                   help="a device silent this long is offline (default: 3 of its sampling intervals, at least 10s)")
    p.add_argument("--quiet-period", type=duration_ns, metavar="DURATION",
                   help="resolve an OOM, Xid or other event incident not seen again for this long (default 30m)")
    p.add_argument("--alerts", type=Path, metavar="FILE",
                   help="alert rules, notifiers and objectives (TOML; see docs/alerting.md), reloaded when the file changes")
    p.add_argument("--dashboard-url", metavar="URL", help="the dashboard's address, for the links in notifications")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="worker processes sharing the port (SO_REUSEPORT), to use more than one core (default 1)")
    # Which worker of `--workers N` this process is (0, 1, ...): it shares --listen with its siblings
    # (SO_REUSEPORT). Set by _run_workers only.
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    # The file the workers share their agent counts in (ingest.worker_balance). Set by _run_workers only.
    p.add_argument("--worker-loads", default=None, help=argparse.SUPPRESS)
    p.add_argument("--metrics-listen", type=listen_address, default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="Prometheus endpoints /metrics (self), /metrics/fleet (every device, DCGM names), /healthz, /readyz "
                        "(default %(default)s; 'off' for none; with --workers, the first worker to bind it)")
    limits = p.add_argument_group("connection limits", "what one collector process gives its clients (per worker)")
    limits.add_argument("--max-connections", type=int, metavar="N",
                        help="most connections at once; more are closed on arrival (default 10000, lowered to keep 128 "
                             "of the open-file limit, which the collector raises to its hard limit, for the database)")
    limits.add_argument("--idle-timeout", type=duration_ns, default=300 * 10**9, metavar="DURATION",
                        help="close a connection without a call for this long (default 5m; agents keep a stream open)")
    limits.add_argument("--handshake-timeout", type=duration_ns, default=20 * 10**9, metavar="DURATION",
                        help="close a connection that has not started HTTP/2 within this time (default 20s)")
    limits.add_argument("--keepalive-time", type=duration_ns, default=60 * 10**9, metavar="DURATION",
                        help="ping a connection after this long without traffic (default 1m)")
    limits.add_argument("--keepalive-timeout", type=duration_ns, default=20 * 10**9, metavar="DURATION",
                        help="drop a connection whose ping is not answered within this time, such as a client that "
                             "stopped half-way through a batch (default 20s)")
    limits.add_argument("--max-unacked", type=size_bytes, default=64 << 20, metavar="SIZE",
                        help="bytes of batches read from all streams and not yet stored; above it streams are not read, "
                             "so a slow database slows the agents (their spools keep the rest) instead of growing this "
                             "process (default 64MiB)")
    limits.add_argument("--max-registrations-in-flight", type=whole_number_at_least(1), default=8, metavar="N",
                        help="agent registrations written to the database at once; more wait until their deadline, and "
                             "beyond four times this many waiting are refused with a retry-after (default %(default)s)")
    from fleetscope.collector.commands import security  # TLS, limits per agent; `certs`, `token`, `device`

    security.add_collector_arguments(p)
    p.set_defaults(func=needs_collector(run_collector))


def _listen_arg(value: str) -> str:
    """--listen's value: HOST:PORT with a port number (gRPC's own message for another form is a
    traceback); 'off' is not an option here."""
    try:
        address = listen_address(value)
    except argparse.ArgumentTypeError:
        address = None
    if address is None:
        raise argparse.ArgumentTypeError(f"not an address: {value!r} (examples: 127.0.0.1:4317, 0.0.0.0:4317, [::1]:4317)")
    return "[::]" + address if address.startswith(":") else address  # ":4317", every interface, as gRPC spells it


def _retention_arg(value: str) -> str:
    """--retention's value, checked (a bad one is argparse's one error line) and kept as text, so
    that `config show` prints it as given."""
    from fleetscope.collector.jobs.retention import parse_retention

    try:
        parse_retention(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--retention: ").removeprefix("--retention ")) from None
    return value


def _retention_settings(args: argparse.Namespace) -> dict[str, Any]:
    from fleetscope.collector.jobs.retention import parse_retention

    if args.no_retention:
        return {"retention": None}
    return {} if args.retention is None else {"retention": parse_retention(args.retention)}



def run_collector(args: argparse.Namespace) -> int:
    from fleetscope.collector.commands import security
    from fleetscope.collector.errors import CannotListen, StoreUnavailable
    from fleetscope.collector.ingest.server import (
        Collector,
        CollectorSettings,
        listen_problem,
        read_tokens_file,
    )

    tokens = None
    if args.tokens_file:
        tokens = read_tokens_file(args.tokens_file)
    elif args.token:
        tokens = frozenset([args.token])
    settings = CollectorSettings(listen=args.listen, reuse_port=args.worker_index is not None,
                                 worker_loads=args.worker_loads, worker_index=args.worker_index or 0, db_url=args.db, tokens=tokens, max_batch_bytes=args.max_batch_size,
                                 grace_s=args.grace / 1e9, rollups=not args.no_rollups, upgrade_db=not args.no_db_upgrade,
                                 compaction=not args.no_compaction, fold_after_s=args.fold_after / 1e9,
                                 max_connections=args.max_connections, idle_timeout_s=args.idle_timeout / 1e9,
                                 handshake_timeout_s=args.handshake_timeout / 1e9, keepalive_time_s=args.keepalive_time / 1e9,
                                 keepalive_timeout_s=args.keepalive_timeout / 1e9, max_unacked_bytes=args.max_unacked,
                                 max_registrations_in_flight=args.max_registrations_in_flight,
                                 alerts_file=args.alerts, dashboard_url=args.dashboard_url, metrics_listen=args.metrics_listen,
                                 **_detector_args(args), **_retention_settings(args), **security.collector_security(args))
    if args.alerts is not None:
        from fleetscope.collector.alerting.rules import RulesError, load_rules

        try:
            load_rules(args.alerts)
        except RulesError as exc:
            print(f"fleetscope collector: {visible(str(exc))}", file=sys.stderr)
            return 2
    # The port before anything else (the database, the jobs): a port another process holds is one
    # line. The workers of --workers N share theirs with each other only (--worker-index), so a lone
    # collector or another group on it is refused here, before a worker starts.
    worker = args.worker_index is not None
    if not worker and (problem := listen_problem(args.listen)):
        print(f"fleetscope collector: {problem}", file=sys.stderr)
        return 1
    if worker and args.worker_index > 0:
        # Every worker reads the same rules file; the first says what they found (a reload, or why
        # not), so that a change is one line, not one per worker.
        logging.getLogger("fleetscope.collector.alerting.rules").setLevel(logging.CRITICAL)
    if not worker:  # a worker's notices were said once, by the process that started the group
        security.print_auth_notice(args, tokens)
    if args.workers > 1:
        return _run_workers(args)
    try:
        collector = Collector(settings)
        if not worker:
            security.print_warnings(args)
        collector.serve()
    except (StoreUnavailable, CannotListen) as exc:
        print(f"fleetscope collector: {exc}", file=sys.stderr)
        return 1
    return 0


def _detector_args(args: argparse.Namespace) -> dict[str, Any]:
    """CollectorSettings' detector fields from the flags (which win over a rules file)."""
    if args.no_detectors:
        return {"detectors": None}
    overrides: dict[str, Any] = {}
    if args.offline_after is not None:
        overrides["offline_after_s"] = args.offline_after / 1e9
    if args.quiet_period is not None:
        overrides["quiet_period_s"] = args.quiet_period / 1e9
    return {"detector_overrides": overrides}


def _run_workers(args: argparse.Namespace) -> int:
    """N collector processes on one port: the kernel spreads connections, the database is shared.

    Each worker is a whole collector (stateless but for caches), exactly as N replicas behind a
    load balancer would be; the exactly-once claim in the database makes that safe.
    """
    import os
    import shutil
    import signal
    import subprocess
    import tempfile

    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.ingest.worker_balance import WorkerLoads
    from fleetscope.collector.storage.engine import ensure_schema, make_engine

    if args.listen.rsplit(":", 1)[-1] == "0":
        print("fleetscope collector: --workers needs a fixed port in --listen", file=sys.stderr)
        return 2
    try:
        engine = make_engine(args.db, create=False)
        try:  # create or upgrade the schema once, before the workers start
            ensure_schema(engine, upgrade=not args.no_db_upgrade)
        finally:
            engine.dispose()
    except StoreUnavailable as exc:
        print(f"fleetscope collector: {exc}", file=sys.stderr)
        return 1
    from fleetscope.collector.commands import security

    security.print_warnings(args)  # once for the group, as a lone collector says them
    argv = [a for a in sys.argv[1:]]
    if "--workers" in argv:
        i = argv.index("--workers")
        del argv[i : i + 2]
    argv = [x for x in argv if not x.startswith("--workers=")]
    loads_dir = tempfile.mkdtemp(prefix="fleetscope-workers-")
    loads = os.path.join(loads_dir, "agents")
    WorkerLoads.create(loads, args.workers)
    try:
        children = [subprocess.Popen([sys.executable, "-m", "fleetscope.cli", *argv, "--workers", "1", "--worker-index", str(i),
                                      "--worker-loads", loads])
                    for i in range(args.workers)]

        def forward(signum: int, _frame: object) -> None:
            for c in children:
                if c.poll() is None:
                    c.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, forward)
        codes = [c.wait() for c in children]
    finally:
        shutil.rmtree(loads_dir, ignore_errors=True)
    return max(codes)

