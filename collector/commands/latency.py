"""``fleetscope latency``: latency percentiles per timed operation, from merged histograms."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from fleetscope.cli.args import time_ns, time_text
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    db_arg,
    fmt_value,
    needs_collector,
    open_session,
    print_empty,
    print_json,
    table,
    unknown_device,
)

if TYPE_CHECKING:  # the parser is built without SQLAlchemy; only type checkers see these
    from fleetscope.collector.query import LatencyStats


def register(sub: Any) -> None:
    p = sub.add_parser("latency", help="latency percentiles per operation, from merged histograms")
    db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--name", help="only this operation (as named in the SDK's latency())")
    p.add_argument("--since", default="1h", type=time_text, help="start (default 1h ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.set_defaults(func=needs_collector(run_latency))


def run_latency(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice

    since, until = time_ns(args.since), time_ns(args.until)
    with open_session(args.db) as session:
        try:
            device = query.get_device(session=session, device=args.device, now_ns=time.time_ns())
            # The device as typed: a name reads every install of it, an agent id one.
            views = query.latency_stats(session=session, devices=[args.device], since_ns=since, until_ns=until, name=args.name)
            timed = [] if views else query.latency_operations(session=session, devices=[args.device], since_ns=since,
                                                              until_ns=until)
        except UnknownDevice as exc:
            return unknown_device(exc)
    if args.json:
        print_json({"latency": [_latency_json(device.name, v) for v in views]})
        return 0
    headers = ["OPERATION", "LABELS", "CALLS", "ERRORS", "MEAN", "P50", "P90", "P99", "P99.9", "CALLS/S"]
    if not views:
        if args.name and timed:
            print_empty(visible(f"no latency data: --name {args.name} matched none of the operations "
                           f"{device.name} timed in that range ({', '.join(timed[:20])})"), headers)
        else:
            print_empty("no latency data in that range: time code with fleetscope.agent.sdk.latency(...)", headers)
        return 0
    table(headers,
           [[v.name, ",".join(f"{k}={x}" for k, x in sorted(v.labels.items())) or "-", str(v.count), str(v.errors),
             *[fmt_value(x, " ms") for x in (v.mean_ms, v.p50_ms, v.p90_ms, v.p99_ms, v.p999_ms)], fmt_value(v.qps)] for v in views])
    return 0


def _latency_json(device: str, v: LatencyStats) -> dict[str, Any]:
    """One row of ``latency --json``: a ``LatencyStats`` under the names this output has always used."""
    return {"device": device, "name": v.name, "labels": v.labels, "count": v.count, "errors": v.errors,
            "mean_ms": v.mean_ms, "p50_ms": v.p50_ms, "p90_ms": v.p90_ms, "p99_ms": v.p99_ms, "p999_ms": v.p999_ms,
            "calls_per_s": v.qps}

