"""The collector's subcommands: ``collector`` (serve) and the queries ``devices``, ``metrics``,
``logs``, ``latency``, ``incidents``, ``incident``, which read through the read API (``fleetscope.collector.query``,
the dashboard's too). Parsers are built without importing SQLAlchemy, so ``fleetscope --help``
works on a drone; a handler checks for the extra first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetscope.cli.args import (
    duration_ns,
    format_ago,
    format_bytes,
    format_ns,
    label,
    listen_address,
    size_bytes,
    time_ns,
    time_text,
)
from fleetscope.cli.terminal import visible
from fleetscope.collector import query_output
from fleetscope.proto.vocabulary import LOG_LEVELS

if TYPE_CHECKING:  # the parser is built without SQLAlchemy; only type checkers see these
    from fleetscope.collector.query import IncidentContext, LatencyStats

DEFAULT_DB = os.environ.get("FLEETSCOPE_DB", "sqlite:///fleetscope-data/fleetscope.db")


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, metavar="URL",
                   help="database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (env FLEETSCOPE_DB; default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON document (for jq) instead of a table")
    if p.prog.split()[1:2] != ["db"]:  # every query command; `db upgrade|current` print no table
        query_output.add_csv_flag(p)


def register(sub: Any) -> None:
    p = sub.add_parser("collector", help="run a collector: gRPC ingest into SQLite or PostgreSQL",
                       description="Receive agents' streams over gRPC and store them exactly once in SQL.")
    p.add_argument("--listen", default=os.environ.get("FLEETSCOPE_LISTEN", "127.0.0.1:4317"), metavar="HOST:PORT",
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
    from fleetscope.collector import security_cli  # TLS, limits per agent; `certs`, `token`, `device`

    security_cli.add_collector_arguments(p)
    p.set_defaults(func=_needs_collector(run_collector))

    p = sub.add_parser("devices", help="list registered devices", description="Every device that registered, with its state.")
    _db_arg(p)
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="only devices with this label (repeat: every key must match, any value of one key will do)")
    p.set_defaults(func=_needs_collector(run_devices))

    p = sub.add_parser("metrics", help="a device's host and GPU samples over a time range")
    _db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--since", default="1h", type=time_text, help="start: a duration ago (1h, 7d) or a time (ISO 8601); default 1h")
    p.add_argument("--until", default="now", type=time_text, help="end: a time or a duration ago; default now")
    p.add_argument("--limit", type=int, default=200_000, help="most rows per table (default %(default)s)")
    p.add_argument("--raw", action="store_true", help="every sample too, not only min/mean/max/last per metric")
    p.set_defaults(func=_needs_collector(run_metrics))

    p = sub.add_parser("logs", help="a device's log events")
    _db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--grep", help="only lines containing this text")
    p.add_argument("--level", choices=list(LOG_LEVELS), help="only this level")
    p.add_argument("--since", default="24h", type=time_text, help="start (default 24h ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.add_argument("--limit", type=int, default=1000, help="most lines, newest kept (default %(default)s)")
    p.add_argument("-f", "--follow", action="store_true", help="then print new events as they arrive, until Ctrl-C")
    p.set_defaults(func=_needs_collector(run_logs))

    p = sub.add_parser("latency", help="latency percentiles per operation, from merged histograms")
    _db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--name", help="only this operation (as named in the SDK's latency())")
    p.add_argument("--since", default="1h", type=time_text, help="start (default 1h ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.set_defaults(func=_needs_collector(run_latency))

    p = sub.add_parser("incidents", help="OOM, Xid, TensorRT, latency and other incidents",
                       description="Incidents whose span (start to last occurrence) overlaps the range, newest first. "
                                   "Repeats of one failure are one incident with a count.")
    _db_arg(p)
    p.add_argument("--device", help="only this device (a name: every install of it; an agent id: one)")
    p.add_argument("--kind", action="append", default=[], metavar="KIND",
                   help="only this kind (cuda_oom, host_oom, gpu_xid, tensorrt_error, ...); repeat for several")
    p.add_argument("--open", action="store_true", help="only open incidents (not yet resolved)")
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="only devices with this label (repeat: all must match)")
    p.add_argument("--since", default="7d", type=time_text, help="start (default 7d ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.add_argument("--limit", type=int, default=1000, help="most incidents, newest first (default %(default)s)")
    p.set_defaults(func=_needs_collector(run_incidents))

    p = sub.add_parser("incident", help="one incident whole: facts, context chart, hints, log lines",
                       description="One incident: its lifecycle and facts, a text chart of the device around it "
                                   "(GPU memory, temperature, clocks, host memory), its hints and the log lines near it.")
    p.add_argument("id", metavar="ID", help="the incident's id (the ID column of 'fleetscope incidents')")
    _db_arg(p)
    p.add_argument("--before", type=duration_ns, default=300 * 10**9, metavar="DURATION",
                   help="how much of the device before it to show (default 5m)")
    p.add_argument("--after", type=duration_ns, default=300 * 10**9, metavar="DURATION",
                   help="and after its last occurrence (default 5m)")
    p.set_defaults(func=_needs_collector(run_incident))

    from fleetscope.collector import alerts_cli  # `alerts` and `silence`: in their own module

    alerts_cli.register(sub)
    query_output.register_compare(sub, _db_arg, _needs_collector)  # `compare`
    from fleetscope.collector import status_cli  # `status`: in its own module

    status_cli.register(sub)
    security_cli.register(sub)


# ---------------------------------------------------------------- handlers


def _needs_collector(handler: Any) -> Any:
    """Check for the collector extra before the handler imports SQLAlchemy."""

    def run(args: argparse.Namespace) -> int:
        from fleetscope.cli.extras import require

        require("collector", "sqlalchemy")
        _OUTPUT["csv"] = bool(getattr(args, "csv", False))  # _table prints CSV for every query command
        if _OUTPUT["csv"] and getattr(args, "json", False):
            print(f"fleetscope {args.command}: --json and --csv: choose one", file=sys.stderr)
            return 2
        return handler(args)

    return run


_OUTPUT = {"csv": False}


@contextmanager
def _session(url: str) -> Iterator[Any]:
    """A read-only session on the database at ``url``; exits with a hint when it holds no fleetscope data."""
    from fleetscope.collector import query

    missing = query.missing_sqlite_file(url)
    if missing is not None:  # opening it would create an empty file
        print(f"no database file at {missing}: start a collector with --db {url} first, or give the --db "
              "the collector writes to", file=sys.stderr)
        raise SystemExit(1)
    engine = query.open_database(url)
    try:
        if not query.has_schema(engine):
            print(f"no fleetscope data in {url}: start a collector with --db {url} first", file=sys.stderr)
            raise SystemExit(1)
        problem = query.schema_problem(engine)
        if problem:
            print(problem, file=sys.stderr)
            raise SystemExit(1)
        with query.session_scope(engine) as session:
            yield session
    finally:
        engine.dispose()  # a command run in-process (tests, scripts) leaves no connection behind


def _print_json(doc: Any) -> None:
    from fleetscope.collector import query

    json.dump(query.to_jsonable(doc), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _table(headers: list[str], rows: list[list[str]]) -> None:
    """Rows of text, every cell made visible: names, labels and titles come from devices (CSV with --csv)."""
    if _OUTPUT["csv"]:
        query_output.print_csv(headers, rows)
        return
    rows = [[visible(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


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


def _unknown_device(exc: Exception) -> int:
    print(visible(str(exc)), file=sys.stderr)
    return 1


def run_collector(args: argparse.Namespace) -> int:
    from fleetscope.collector import security_cli
    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.ingest.server import Collector, CollectorSettings, read_tokens_file

    tokens = None
    if args.tokens_file:
        tokens = read_tokens_file(args.tokens_file)
    elif args.token:
        tokens = frozenset([args.token])
    settings = CollectorSettings(listen=args.listen, db_url=args.db, tokens=tokens, max_batch_bytes=args.max_batch_size,
                                 grace_s=args.grace / 1e9, rollups=not args.no_rollups, upgrade_db=not args.no_db_upgrade,
                                 compaction=not args.no_compaction, fold_after_s=args.fold_after / 1e9,
                                 max_connections=args.max_connections, idle_timeout_s=args.idle_timeout / 1e9,
                                 handshake_timeout_s=args.handshake_timeout / 1e9, keepalive_time_s=args.keepalive_time / 1e9,
                                 keepalive_timeout_s=args.keepalive_timeout / 1e9, max_unacked_bytes=args.max_unacked,
                                 alerts_file=args.alerts, dashboard_url=args.dashboard_url, metrics_listen=args.metrics_listen,
                                 **_detector_args(args), **_retention_settings(args), **security_cli.collector_security(args))
    if args.alerts is not None:
        from fleetscope.collector.alerting.rules import RulesError, load_rules

        try:
            load_rules(args.alerts)
        except RulesError as exc:
            print(f"fleetscope collector: {visible(str(exc))}", file=sys.stderr)
            return 2
    security_cli.print_auth_notice(args, tokens)
    if args.workers > 1:
        return _run_workers(args)
    try:
        collector = Collector(settings)
        security_cli.print_warnings(args)
        collector.serve()
    except StoreUnavailable as exc:
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
    import signal
    import subprocess

    from fleetscope.collector.errors import StoreUnavailable
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
    argv = [a for a in sys.argv[1:]]
    if "--workers" in argv:
        i = argv.index("--workers")
        del argv[i : i + 2]
    argv = [x for x in argv if not x.startswith("--workers=")]
    children = [subprocess.Popen([sys.executable, "-m", "fleetscope.cli", *argv, "--workers", "1"]) for _ in range(args.workers)]

    def forward(signum: int, _frame: object) -> None:
        for c in children:
            if c.poll() is None:
                c.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    codes = [c.wait() for c in children]
    return max(codes)


def run_devices(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.query.devices import device_state, labels_match

    now = time.time_ns()
    wanted = [f"{k}={v}" for k, v in args.label]  # keys must all match; several values of one key: any
    with _session(args.db) as session:
        everyone = query.list_devices(session=session, now_ns=now)
    devices = [d for d in everyone if labels_match(d.labels, wanted)]
    states = {d.agent_id: device_state(d, everyone) for d in everyone}
    if args.json:
        _print_json({"devices": devices})
        return 0
    headers = ["DEVICE", "KIND", "STATE", "LAST SEEN", "GPUS", "LABELS", "BATCHES", "REJECTED", "DROPPED", "SPOOLED"]
    if not devices:
        if not everyone:
            _empty("no devices yet: start an agent with 'fleetscope agent --collector HOST:PORT --name NAME'", headers)
        else:
            _empty(_label_miss(everyone, wanted), headers)
        return 0
    rows = []
    for d in devices:
        c = d.counters
        st = states[d.agent_id]
        rows.append([
            d.name, d.kind, "OFFLINE" if st == "offline" else st, format_ago(d.last_seen_ns, now), str(d.gpu_count),
            ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "-",
            str(d.batches_stored), str(d.batches_rejected),
            str(c.get("dropped_samples", 0)), str(c.get("spool_batches", 0)),
        ])
    _table(headers, rows)
    if not _OUTPUT["csv"]:
        names = [d.name for d in devices]
        for name in sorted({n for n in names if names.count(n) > 1}):
            ids = ", ".join(d.agent_id for d in devices if d.name == name)
            print(f"{visible(name)}: {names.count(name)} installs (agent ids {visible(ids)}): --device {visible(name)} "
                  "reads them all as one history; --device AGENT_ID reads one")
    return 0


def _label_miss(everyone: list[Any], wanted: list[str]) -> str:
    """Which --label emptied the device list, with the values that key has."""
    from fleetscope.collector.query.devices import labels_match

    for i in range(len(wanted)):
        if not [d for d in everyone if labels_match(d.labels, wanted[: i + 1])]:
            key = wanted[i].partition("=")[0]
            values = sorted({d.labels[key] for d in everyone if key in d.labels})
            known = f"values of {key!r}: {', '.join(values)}" if values else f"no device has a label {key!r}"
            before = f" with {' '.join('--label ' + w for w in wanted[:i])}" if i else ""
            return visible(f"no devices: --label {wanted[i]} matched none of the {len(everyone)} devices{before} ({known})")
    return "no devices match"


def _empty(message: str, headers: list[str]) -> None:
    """An empty result: CSV gets its header row (and the reason on stderr), a table the reason."""
    if _OUTPUT["csv"]:
        _table(headers, [])
        print(message, file=sys.stderr)
    else:
        print(message)


def run_metrics(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice
    from fleetscope.collector.query.devices import device_installs
    from fleetscope.collector.query.samples import metrics_summary

    since, until = time_ns(args.since), time_ns(args.until)
    with _session(args.db) as session:
        try:
            installs = device_installs(session=session, device=args.device, now_ns=until)
            summary = metrics_summary(session=session, device=args.device, since_ns=since, until_ns=until)
            # What nvitop and jtop show (processes, ECC, PCIe, limits; rails, engines), as of --until.
            hw_gpus = query.gpu_hardware_all_installs(session=session, device=args.device, until_ns=until)
            hw_board = query.jetson_view_all_installs(session=session, device=args.device, until_ns=until)
            m = None
            if args.raw or args.json:
                m = query.device_metrics(session=session, device=args.device, since_ns=since, until_ns=until, limit=args.limit)
        except UnknownDevice as exc:
            return _unknown_device(exc)
    if args.json:
        assert m is not None
        # An ISO 8601 time (UTC) beside every *_ns time: "ts" beside "ts_ns".
        query_output.print_json({**query.to_jsonable(m), "installs": [d.agent_id for d in installs], "summary": summary.metrics,
                                 "hardware": query_output.hardware_doc(hw_gpus, hw_board)})
        return 0
    if args.csv:
        if args.raw:
            assert m is not None
            _metrics_raw_csv(m)
        else:
            query_output.metrics_summary_csv(summary)
        if not summary.host_samples and not summary.gpu_samples:
            print(_no_samples(args, installs, since, until), file=sys.stderr)
        return 0
    label_ = installs[0].name + (f" ({len(installs)} installs)" if len(installs) > 1 else "")
    query_output.print_metrics_summary(summary, label_)
    if not summary.host_samples and not summary.gpu_samples:
        print(_no_samples(args, installs, since, until))
        return 0
    query_output.print_hardware(hw_gpus, hw_board)
    if m is not None:
        if m.host:
            rows = [[format_ns(p.ts_ns), _fmt(p.values["cpu_percent"], "%"), _fmt(p.values["load1"]),
                     format_bytes(p.values["mem_used_bytes"]), format_bytes(p.values["mem_total_bytes"]),
                     format_bytes(p.values["swap_used_bytes"])] for p in m.host]
            print(f"\nhost ({len(m.host)} samples)")
            _table(["TIME", "CPU", "LOAD1", "MEM USED", "MEM TOTAL", "SWAP USED"], rows)
        if m.gpu:
            rows = [[format_ns(p.ts_ns), str(p.gpu_index), _fmt(p.values["util_gpu_percent"], "%"),
                     format_bytes(p.values["memory_used_bytes"]), _fmt(p.values["temp_c"], " C"),
                     _fmt(p.values["power_w"], " W"), _fmt(p.values["sm_clock_mhz"], " MHz")] for p in m.gpu]
            print(f"\nGPU ({len(m.gpu)} samples)")
            _table(["TIME", "GPU", "UTIL", "MEM USED", "TEMP", "POWER", "SM CLOCK"], rows)
    else:
        print("\n--raw lists every sample; --json and --csv give the figures to programs")
    return 0


def _no_samples(args: argparse.Namespace, installs: list[Any], since: int, until: int) -> str:
    """Why ``metrics`` found nothing: the range (the device's samples end or start elsewhere), or no samples at all."""
    from fleetscope.collector.query.samples import last_sample_ns

    with _session(args.db) as session:
        last = last_sample_ns(session=session, device=args.device)
    name = installs[0].name
    if last is None:
        return visible(f"no samples from {name} at all (an agent started with --no-host --no-gpu sends none)")
    if last < since:
        return visible(f"no samples from {name} in that range: its newest sample is from {format_ns(last)} UTC "
                       f"(try --since {format_ns(last - 600 * 10**9).replace(' ', 'T')})")
    return visible(f"no samples from {name} between {format_ns(since)} and {format_ns(until)} UTC "
                   f"(it has some from before and after)")


def _metrics_raw_csv(m: Any) -> None:
    """Every sample as one row per reading: ts_ns, ts, scope, metric, value."""
    rows: list[list[Any]] = []
    for p in m.host:
        rows += [[p.ts_ns, query_output.iso(p.ts_ns), "host", k, v] for k, v in p.values.items() if v is not None]
    for p in m.gpu:
        rows += [[p.ts_ns, query_output.iso(p.ts_ns), f"GPU {p.gpu_index}", k, v] for k, v in p.values.items() if v is not None]
    rows.sort(key=lambda r: r[0])
    query_output.print_csv(["ts_ns", "ts", "scope", "metric", "value"], rows)


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


def _print_log_line(ln: Any) -> None:
    # A multi-line event (a traceback) keeps its line breaks; its continuation lines are
    # indented so that no line of a message can pass for a log line of its own.
    message = visible(ln.message, keep_line_breaks=True).replace("\n", "\n    ")
    print(f"{format_ns(ln.ts_ns)} {visible(ln.level.upper()):8} {visible(ln.source)}: {message}")


def run_logs(args: argparse.Namespace) -> int:
    from fleetscope.collector.errors import UnknownDevice
    from fleetscope.collector.query.installs import search_logs_all_installs

    since, until = time_ns(args.since), time_ns(args.until)
    flags = [f for f in (f"--level {args.level}" if args.level else "", f"--grep {args.grep!r}" if args.grep else "") if f]
    with _session(args.db) as session:
        try:
            lines = search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=until,
                                      levels=[args.level] if args.level else None, text=args.grep, limit=args.limit)

            def has_rows(k: int) -> bool:
                level = args.level if k >= 1 and args.level else None
                grep = args.grep if (k >= 2 or (k >= 1 and not args.level)) and args.grep else None
                return bool(search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=until,
                                              levels=[level] if level else None, text=grep, limit=1))

            empty = None if lines else query_output.explain_empty(
                "log events", flags, has_rows, hint="an agent sends its device's kernel log, journal and --log-file files")
        except UnknownDevice as exc:
            return _unknown_device(exc)
    if args.json and not args.follow:
        _print_json({"logs": lines})
        return 0
    if args.csv and not args.follow:
        query_output.print_csv(["ts_ns", "ts", "device", "level", "source", "message"],
                               [[ln.ts_ns, query_output.iso(ln.ts_ns), ln.device, ln.level, ln.source, ln.message] for ln in lines])
        if empty:
            print(visible(empty), file=sys.stderr)
        return 0
    if args.follow:
        if args.csv:
            query_output.print_csv(["ts_ns", "ts", "device", "level", "source", "message"], [])
        try:
            return query_output.follow_logs(args, _session, _print_log_line)
        except KeyboardInterrupt:
            return 0
    for ln in lines:
        _print_log_line(ln)
    if empty:
        print(visible(empty))
    return 0


def run_latency(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice

    since, until = time_ns(args.since), time_ns(args.until)
    with _session(args.db) as session:
        try:
            device = query.get_device(session=session, device=args.device, now_ns=time.time_ns())
            # The device as typed: a name reads every install of it, an agent id one.
            views = query.latency_stats(session=session, devices=[args.device], since_ns=since, until_ns=until, name=args.name)
            timed = [] if views else query.latency_operations(session=session, devices=[args.device], since_ns=since,
                                                              until_ns=until)
        except UnknownDevice as exc:
            return _unknown_device(exc)
    if args.json:
        _print_json({"latency": [_latency_json(device.name, v) for v in views]})
        return 0
    headers = ["OPERATION", "LABELS", "CALLS", "ERRORS", "MEAN", "P50", "P90", "P99", "P99.9", "CALLS/S"]
    if not views:
        if args.name and timed:
            _empty(visible(f"no latency data: --name {args.name} matched none of the operations "
                           f"{device.name} timed in that range ({', '.join(timed[:20])})"), headers)
        else:
            _empty("no latency data in that range: time code with fleetscope.agent.sdk.latency(...)", headers)
        return 0
    _table(headers,
           [[v.name, ",".join(f"{k}={x}" for k, x in sorted(v.labels.items())) or "-", str(v.count), str(v.errors),
             *[_fmt(x, " ms") for x in (v.mean_ms, v.p50_ms, v.p90_ms, v.p99_ms, v.p999_ms)], _fmt(v.qps)] for v in views])
    return 0


def _latency_json(device: str, v: LatencyStats) -> dict[str, Any]:
    """One row of ``latency --json``: a ``LatencyStats`` under the names this output has always used."""
    return {"device": device, "name": v.name, "labels": v.labels, "count": v.count, "errors": v.errors,
            "mean_ms": v.mean_ms, "p50_ms": v.p50_ms, "p90_ms": v.p90_ms, "p99_ms": v.p99_ms, "p999_ms": v.p999_ms,
            "calls_per_s": v.qps}


def run_incidents(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice, UnknownIncidentKind

    now = time.time_ns()
    kinds = list(dict.fromkeys(args.kind)) or None
    labels: dict[str, str] = dict(args.label) or {}
    with _session(args.db) as session:
        try:
            devices = None
            if args.device:  # a name or an agent id, as typed: unknown is an error, not an empty list
                query.get_device(session=session, device=args.device, now_ns=now)
                devices = [args.device]  # a name reaches every install of it, an agent id one
            filters: dict[str, Any] = dict(
                since_ns=time_ns(args.since), until_ns=time_ns(args.until), devices=devices,
                kinds=kinds, open_only=args.open, labels=labels or None,
                limit=args.limit,
            )
            if args.json:  # JSON carries each incident's context (the device's samples a minute either side)
                contexts = query.incidents_with_context(session=session, **filters)
                found = bool(contexts)
            else:
                incidents = query.search_incidents(session=session, **filters)
                found = bool(incidents)
            empty = None
            if not found:
                steps: list[tuple[str, dict[str, Any]]] = []
                if args.device:
                    steps.append((f"--device {args.device}", {"devices": devices}))
                if kinds:
                    steps.append((" ".join(f"--kind {k}" for k in kinds), {"kinds": kinds}))
                acc: dict[str, str] = {}
                for k, v in labels.items():
                    acc = {**acc, k: v}  # each step keeps the labels before it
                    steps.append((f"--label {k}={v}", {"labels": acc}))
                if args.open:
                    steps.append(("--open", {"open_only": True}))

                def has_rows(k: int) -> bool:
                    f: dict[str, Any] = dict(since_ns=filters["since_ns"], until_ns=filters["until_ns"], limit=1)
                    for _flag, part in steps[:k]:
                        f.update(part)
                    return bool(query.search_incidents(session=session, **f))

                empty = query_output.explain_empty("incidents", [s[0] for s in steps], has_rows)
        except UnknownDevice as exc:
            return _unknown_device(exc)
        except UnknownIncidentKind as exc:
            print(f"fleetscope incidents: {visible(str(exc))}", file=sys.stderr)
            return 2
    if args.json:
        _print_json({"incidents": [_incident_json(c) for c in contexts]})
        return 0
    headers = ["ID", "STARTED", "LAST SEEN", "DEVICE", "KIND", "STATE", "COUNT", "SEVERITY", "TITLE"]
    if empty:
        _empty(visible(empty), headers)
        return 0
    _table(headers,
           [[str(i.id), format_ns(i.ts_ns), format_ago(max(i.last_seen_ns, i.ts_ns), now), i.device, i.kind,
             i.state + (" (imported)" if i.origin == "import" else ""), str(i.count), i.severity, i.title[:100]]
            for i in incidents])
    return 0


def run_incident(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownIncident

    try:
        incident_id = int(args.id)
    except ValueError:
        print(f"fleetscope incident: an incident id is a number, got {visible(repr(args.id))}", file=sys.stderr)
        return 2
    with _session(args.db) as session:
        try:
            ctx = query.incident_with_context(session=session, incident_id=incident_id, before_s=args.before / 1e9,
                                              after_s=args.after / 1e9, log_window_s=60, log_limit=200)
        except UnknownIncident as exc:
            print(f"fleetscope incident: {visible(str(exc))}", file=sys.stderr)
            return 1
    if args.json:
        doc = _incident_json(ctx)
        doc["context"]["nearby"] = query.to_jsonable(ctx.nearby)
        _print_json(doc)
        return 0
    _print_incident(ctx, time.time_ns())
    return 0


_SPARK = "▁▂▃▄▅▆▇█"
_CHART_WIDTH = 60


def _sparkline(points: list[tuple[int, float]], since_ns: int, until_ns: int, width: int = _CHART_WIDTH) -> str:
    """``points`` (time, value) as one line of block characters, the window in ``width`` columns
    (each the largest value in it; between two samples the earlier one holds; a space before
    the first sample and after the last)."""
    cols: list[float | None] = [None] * width
    span = max(1, until_ns - since_ns)
    for ts, v in points:
        c = min(width - 1, max(0, (ts - since_ns) * width // span))
        old = cols[c]
        cols[c] = v if old is None else max(old, v)
    filled = [i for i, v in enumerate(cols) if v is not None]
    if filled:
        for i in range(filled[0] + 1, filled[-1]):
            if cols[i] is None:
                cols[i] = cols[i - 1]
    vals = [v for v in cols if v is not None]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    step = (hi - lo) / (len(_SPARK) - 1) if hi > lo else 0.0
    return "".join(" " if v is None else _SPARK[int(round((v - lo) / step)) if step else 3] for v in cols)


def _print_incident(ctx: IncidentContext, now: int) -> None:
    i = ctx.incident
    print(f"incident {i.id}: {visible(i.title)}")
    occurrences = "1 occurrence" if i.count == 1 else f"{i.count} occurrences"
    process = " ".join(x for x in (visible(i.process_name), f"(pid {i.pid})" if i.pid is not None else "") if x)
    for name, value in (
        ("device", visible(i.device)),
        ("kind", f"{visible(i.kind)} ({visible(i.severity)})"),
        ("state", f"{visible(i.state)}, {occurrences}"),
        ("started", f"{format_ns(i.ts_ns)} UTC"),
        ("last seen", f"{format_ns(max(i.last_seen_ns, i.ts_ns))} UTC ({format_ago(max(i.last_seen_ns, i.ts_ns), now)})"),
        ("ended", f"{format_ns(i.ended_ns)} UTC" if i.ended_ns is not None else "-"),
        ("GPU", "-" if i.gpu_index is None else str(i.gpu_index)),
        ("process", process or "-"),
        ("origin", f"{visible(i.origin)}, source {visible(i.source) or '-'}"),
    ):
        print(f"  {name:<10} {value}")
    facts = {k: v for k, v in i.facts.items() if k != "last"}
    if facts:
        print("\nfacts")
        _print_facts(facts)
    last = i.facts.get("last")
    if isinstance(last, dict):
        at = last.get("ts_ns")
        print(f"\nlatest occurrence{' at ' + format_ns(at) + ' UTC' if isinstance(at, int) else ''}")
        _print_facts({k: v for k, v in last.items() if k != "ts_ns"})
    _print_chart(ctx)
    print("\nhints")
    for h in i.hints or []:
        print(f"  - {visible(str(h.get('text', '')))}")
    if not i.hints:
        print("  (none computed)")
    print(f"\nlog lines near it ({len(ctx.logs)})")
    for ln in ctx.logs[-40:]:
        message = visible(ln.message, keep_line_breaks=True).replace("\n", "\n      ")
        print(f"  {format_ns(ln.ts_ns)} {visible(ln.level.upper()):8} {visible(ln.source)}: {message}")
    if not ctx.logs:
        print("  (none)")
    elif len(ctx.logs) > 40:
        print(f"  ... the last 40 of {len(ctx.logs)}; --json has them all")
    if i.excerpt:
        print("\nexcerpt")
        for line in visible(i.excerpt, keep_line_breaks=True).splitlines()[:20]:
            print(f"  {line}")
    if ctx.nearby:
        print(f"\nother incidents on {visible(i.device)} nearby")
        for n in ctx.nearby[:10]:
            print(f"  {n.id:>6}  {format_ns(n.ts_ns)}  {visible(n.kind)}  x{n.count}  {visible(n.title[:80])}")


def _print_facts(facts: dict[str, Any]) -> None:
    width = max((len(visible(str(k))) for k in facts), default=0)
    for k, v in sorted(facts.items()):
        text = json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v)
        print(f"  {visible(str(k)):<{width}}  {visible(text)[:200]}")


def _print_chart(ctx: IncidentContext) -> None:
    """The device around the incident as sparklines, one per reading, with the incident marked."""
    since, until = ctx.since_ns, ctx.until_ns
    rows: list[tuple[str, str, str]] = []
    by_gpu: dict[int, list[Any]] = {}
    for p in ctx.gpu:
        by_gpu.setdefault(p.gpu_index, []).append(p)
    for index, points in sorted(by_gpu.items()):
        for key, label_, fmt in (("memory_used_bytes", "memory", format_bytes),
                                 ("temp_c", "temp", lambda v: f"{v:.0f} C"),
                                 ("sm_clock_mhz", "SM clock", lambda v: f"{v:.0f} MHz")):
            series = [(p.ts_ns, float(v)) for p in points if (v := p.values.get(key)) is not None]
            if series:
                vals = [v for _, v in series]
                rows.append((f"GPU {index} {label_}", _sparkline(series, since, until), f"{fmt(min(vals))} .. {fmt(max(vals))}"))
    host = [(p.ts_ns, float(v)) for p in ctx.host if (v := p.values.get("mem_used_bytes")) is not None]
    if host:
        vals = [v for _, v in host]
        rows.append(("host memory", _sparkline(host, since, until), f"{format_bytes(min(vals))} .. {format_bytes(max(vals))}"))
    print(f"\ncontext {format_ns(since)} .. {format_ns(until)} UTC")
    if not rows:
        print("  (no samples from this device in that window)")
        return
    width = max(len(r[0]) for r in rows)
    for name, line, span in rows:
        print(f"  {name:<{width}}  {line.ljust(_CHART_WIDTH)}  {span}")
    col = min(_CHART_WIDTH - 1, max(0, (ctx.incident.ts_ns - since) * _CHART_WIDTH // max(1, until - since)))
    print(f"  {'':<{width}}  {' ' * col}^ started")
    s = ctx.summary
    for g in s.gpus:
        parts = [f"GPU {g.gpu_index}"]
        if g.memory_used_bytes is not None:
            total = f" of {format_bytes(g.memory_total_bytes)}" if g.memory_total_bytes else ""
            parts.append(f"{format_bytes(g.memory_used_bytes)}{total}")
        if g.temp_c is not None:
            parts.append(f"{g.temp_c:.0f} C")
        if g.sm_clock_mhz is not None:
            parts.append(f"{g.sm_clock_mhz:.0f} MHz")
        if g.throttle_reasons:
            parts.append("throttled: " + ",".join(g.throttle_reasons))
        print("  at the start: " + ", ".join(parts))
    if s.host is not None and s.host.mem_used_bytes is not None:
        total = f" of {format_bytes(s.host.mem_total_bytes)}" if s.host.mem_total_bytes else ""
        print(f"  at the start: host memory {format_bytes(s.host.mem_used_bytes)}{total}")


def _incident_json(ctx: IncidentContext) -> dict[str, Any]:
    """One incident of ``incidents --json``: its fields and, under "context", the device around it,
    in the shape this output has always had."""
    from fleetscope.collector import query

    i = ctx.incident
    return {
        **query.to_jsonable(i),
        "context": {
            "incident_id": i.id,
            "device": i.device,
            "ts_ns": i.ts_ns,
            "since_ns": ctx.since_ns,
            "until_ns": ctx.until_ns,
            **query.to_jsonable(
                {"summary": ctx.summary, "host": ctx.host, "gpu": ctx.gpu, "gpu_state": ctx.gpu_state, "logs": ctx.logs}
            ),
        },
    }
