"""``fleetscope compare``: two or more devices side by side (the dashboard's Compare page): latency
percentiles, throughput, GPU power and energy per inference over one window."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetscope.cli.args import format_ns, time_ns, time_text
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    db_arg,
    needs_collector,
    open_session,
    print_csv,
    print_json_with_times,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="two or more devices side by side: latency percentiles, throughput, power, energy per inference",
        description="Latency percentiles (p50/p90/p99, from merged histograms), throughput, GPU power and energy per "
                    "inference of each device over one window, side by side (the dashboard's Compare page).")
    db_arg(p)
    p.add_argument("--device", action="append", required=True, metavar="NAME",
                   help="a device (name: every install of it; or agent id); repeat, at least twice")
    p.add_argument("--operation", metavar="NAME",
                   help="the timed operation to compare (default: the one the devices timed most)")
    p.add_argument("--since", default="1h", type=time_text, help="start (default 1h ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.set_defaults(func=needs_collector(run_compare))


def run_compare(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice

    names = list(dict.fromkeys(args.device))
    if len(names) < 2:
        print("fleetscope compare: name at least two devices (--device X --device Y)", file=sys.stderr)
        return 2
    since, until = time_ns(args.since), time_ns(args.until)
    with open_session(args.db) as session:
        try:
            for n in names:
                query.get_device(session=session, device=n, now_ns=until)
        except UnknownDevice as exc:
            print(f"fleetscope compare: {visible(str(exc))}", file=sys.stderr)
            return 1
        operation = args.operation
        if operation is None:
            ops = query.latency_operations(session=session, devices=names, since_ns=since, until_ns=until)
            operation = ops[0] if ops else None
        elif operation not in query.latency_operations(session=session, devices=names, since_ns=since, until_ns=until):
            known = query.latency_operations(session=session, devices=names, since_ns=since, until_ns=until)
            print(f"fleetscope compare: no device here timed {operation!r} in that range; "
                  f"timed: {', '.join(known) if known else 'nothing'}", file=sys.stderr)
            return 1
        # The window starts on a whole bucket of the comparison's chart (see comparison_start),
        # and what is printed is the window compared.
        since = query.comparison_start(since, until)
        rows = query.compare_groups(session=session, groups={n: [n] for n in names},
                                    since_ns=since, until_ns=until, operation=operation)
    figures = [_compare_figures(r) for r in rows]
    if args.json:
        print_json_with_times({"since_ns": since, "until_ns": until, "operation": operation, "devices": figures})
        return 0
    if args.csv:
        keys = list(figures[0]) if figures else []
        print_csv(keys, [[f[k] for k in keys] for f in figures])
        return 0
    print(f"{format_ns(since)} .. {format_ns(until)} UTC; operation: {visible(operation) if operation else '(none timed)'}")
    labels = [("p50", "p50_ms", _ms), ("p90", "p90_ms", _ms), ("p99", "p99_ms", _ms), ("calls", "calls", _int),
              ("throughput", "throughput_per_s", lambda v: f"{v:.1f}/s"), ("GPUs", "gpu_count", _int),
              ("GPU power", "power_w", lambda v: f"{v:.1f} W"), ("energy", "energy_j", lambda v: f"{v:.1f} J"),
              ("energy/inference", "energy_per_inference_j", lambda v: f"{v * 1000:.2f} mJ"),
              ("inferences/J", "inferences_per_joule", lambda v: f"{v:.2f}"),
              ("GPU util", "util_percent", lambda v: f"{v:.1f}%"), ("GPU temp max", "temp_max_c", lambda v: f"{v:.0f} C")]
    table = [[name] + [fmt(f[key]) if f[key] is not None else "-" for f in figures] for name, key, fmt in labels]
    headers = [""] + [visible(f["device"]) for f in figures]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if operation is None:
        print("no latency data in that range: time code with fleetscope.agent.sdk.latency(...)")
    return 0


def _ms(v: float) -> str:
    return f"{v:.2f} ms"


def _int(v: float) -> str:
    return str(int(v))


def _compare_figures(r: Any) -> dict[str, Any]:
    lat = r.latency
    return {
        "device": r.group,
        "calls": lat.count if lat else None,
        "p50_ms": lat.p50_ms if lat else None,
        "p90_ms": lat.p90_ms if lat else None,
        "p99_ms": lat.p99_ms if lat else None,
        "throughput_per_s": lat.qps if lat else None,
        "gpu_count": r.gpu_count,
        "power_w": r.power_per_device_w,
        "energy_j": r.energy_j,
        "energy_per_inference_j": r.energy_per_inference_j,
        "inferences_per_joule": r.qps_per_watt,
        "util_percent": r.util_avg,
        "temp_max_c": r.temp_max_c,
    }
