"""``fleetscope status``: one screen of the collector's and the fleet's health.

The collector's health comes from the standard gRPC health service when ``--collector`` is
given (SERVING / NOT_SERVING / unreachable); the fleet's from the database, through the read
API: devices online and offline, the ingest rate over the last minutes, how far the rollup job
and the detectors are behind the data, the spool depths agents report, the database's size,
open incidents and firing alerts. ``--json`` prints the same as one JSON document. Exit status:
0 when everything answered and the collector (if asked) is SERVING, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fleetscope.cli.args import collector_address, format_bytes
from fleetscope.collector.commands.output import DEFAULT_DB


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="one screen of the collector's and the fleet's health",
                       description="Collector health (gRPC health check), devices online/offline, ingest rate, rollup and "
                                   "detector lag, agents' spools, database size, open incidents, firing alerts.")
    p.add_argument("--db", default=DEFAULT_DB, metavar="URL", help="database URL (env FLEETSCOPE_DB; default %(default)s)")
    p.add_argument("--collector", type=collector_address, metavar="HOST:PORT", default=None,
                   help="also ask this collector's gRPC health service (grpc.health.v1) whether it is serving")
    p.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS", help="how long to wait for the collector (default 3)")
    p.add_argument("--tls-ca", type=Path, metavar="FILE", default=None,
                   help="ask a TLS collector, trusting this CA (the ca.pem of `fleetscope certs init`)")
    p.add_argument("--tls-cert", type=Path, metavar="FILE", default=None, help="client certificate, for mutual TLS")
    p.add_argument("--tls-key", type=Path, metavar="FILE", default=None, help="its private key, for mutual TLS")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.set_defaults(func=run_status)


class TLSFileError(Exception):
    """A TLS file for ``status`` cannot be read: one line for the user."""


def _channel_credentials(ca: Path | None, cert: Path | None, key: Path | None) -> Any:
    import grpc

    if (cert is None) != (key is None):
        raise TLSFileError("--tls-cert and --tls-key go together (mutual TLS needs both)")

    def read(path: Path | None, what: str) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise TLSFileError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc

    return grpc.ssl_channel_credentials(root_certificates=read(ca, "CA certificate"),
                                        private_key=read(key, "private key"), certificate_chain=read(cert, "certificate"))


def collector_health(address: str, timeout_s: float = 3.0, *, tls_ca: Path | None = None,
                     tls_cert: Path | None = None, tls_key: Path | None = None) -> str:
    """SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN, or ``unreachable: <reason>``. With a CA (or a
    client certificate) the collector is asked over TLS, as agents reach a collector that has it."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    tls = tls_ca is not None or tls_cert is not None
    channel_of = (lambda: grpc.secure_channel(address, _channel_credentials(tls_ca, tls_cert, tls_key))) if tls else (
        lambda: grpc.insecure_channel(address))
    with channel_of() as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            return f"unreachable: {getattr(code, 'name', code)}"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _status_doc(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    from fleetscope.collector import query
    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.query.latest import fleet_health

    ok = True
    doc: dict[str, Any] = {"collector": None}
    if args.collector:
        health = collector_health(args.collector, args.timeout, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                                  tls_key=args.tls_key)
        doc["collector"] = {"address": args.collector, "health": health}
        ok = health == "SERVING"
    now = time.time_ns()
    missing = query.missing_sqlite_file(args.db)
    if missing:
        doc["database"] = {"url": query.hide_password(args.db), "error": f"no database file at {missing}"}
        return doc, False
    engine = query.open_database(args.db)
    try:
        if not query.has_schema(engine):
            doc["database"] = {"url": query.hide_password(args.db), "error": "no fleetscope data (start a collector with this --db)"}
            return doc, False
        with query.session_scope(engine) as session:
            h = fleet_health(session=session, now_ns=now)
            firing = query.list_alerts(session=session, states=["firing"], now_ns=now)
    except StoreUnavailable as exc:
        doc["database"] = {"url": query.hide_password(args.db), "error": f"unreachable: {exc}"}
        return doc, False
    finally:
        engine.dispose()
    doc["database"] = {"url": query.hide_password(args.db), "bytes": h.database_bytes}
    doc["devices"] = {"total": h.devices, "online": h.online, "offline": h.offline, "stopped": h.stopped}
    doc["ingest"] = {"rows_per_min": round(h.rows_per_min, 1), "batches_per_min": round(h.batches_per_min, 1),
                     "window_s": h.rate_window_s}
    doc["lag"] = [{"job": j.job, "lag_s": None if j.lag_s is None else round(j.lag_s, 1), "device": j.device} for j in h.lags]
    doc["spools"] = h.spools
    doc["open_incidents"] = h.open_incidents
    doc["firing_alerts"] = [{"rule": a.rule, "severity": a.severity, "device": a.device_name, "summary": a.summary,
                             "firing_ns": a.firing_ns} for a in firing]
    return doc, ok


def _text(doc: dict[str, Any]) -> str:
    from fleetscope.cli.terminal import visible

    lines = []
    c = doc.get("collector")
    lines.append(f"collector   {visible(c['address'])}: {c['health']}" if c else "collector   (not asked: give --collector HOST:PORT)")
    db = doc["database"]
    if "error" in db:
        lines.append(f"database    {visible(db['url'])}: {visible(db['error'])}")
        return "\n".join(lines) + "\n"
    lines.append(f"database    {visible(db['url'])}, {format_bytes(db['bytes']) if db['bytes'] is not None else 'size unknown'}")
    d = doc["devices"]
    off = d["offline"]
    shown = ", ".join(visible(n) for n in off[:8]) + (f" (+{len(off) - 8} more)" if len(off) > 8 else "")
    stopped = f", {len(d['stopped'])} stopped" if d.get("stopped") else ""
    lines.append(f"devices     {d['online']} online, {len(off)} offline{stopped} of {d['total']}" + (f": {shown}" if off else ""))
    i = doc["ingest"]
    lines.append(f"ingest      {i['rows_per_min']:,.0f} rows/min, {i['batches_per_min']:,.1f} batches/min (last {i['window_s'] / 60:.0f} min)")
    lags = [f"{j['job']} {j['lag_s']:.0f}s" + (f" ({visible(j['device'])})" if j["device"] else "") for j in doc["lag"] if j["lag_s"] is not None]
    lines.append("lag         " + (", ".join(lags) if lags else "no job progress yet"))
    sp = doc["spools"]
    spool_text = ", ".join(f"{visible(n)} {v['batches']} batches ({format_bytes(v['bytes'])})" for n, v in list(sp.items())[:8])
    lines.append("spools      " + (spool_text + (f" (+{len(sp) - 8} more)" if len(sp) > 8 else "") if sp else "all empty"))
    inc = doc["open_incidents"]
    lines.append("incidents   " + (", ".join(f"{n} {sev}" for sev, n in inc.items()) + " open" if inc else "none open"))
    fa = doc["firing_alerts"]
    lines.append(f"alerts      {len(fa)} firing" if fa else "alerts      none firing")
    for a in fa[:10]:
        lines.append(f"  [{visible(a['severity'])}] {visible(a['rule'])}" + (f" on {visible(a['device'])}" if a["device"] else "")
                     + f": {visible(a['summary'])}")
    return "\n".join(lines) + "\n"


def run_status(args: argparse.Namespace) -> int:
    from fleetscope.cli.extras import require

    require("collector", "sqlalchemy")
    try:
        doc, ok = _status_doc(args)
    except TLSFileError as exc:
        print(f"fleetscope status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        sys.stdout.write(_text(doc))
    return 0 if ok else 1


__all__ = ["collector_health", "register", "run_status"]
