"""What the query commands print beyond their tables: CSV, ISO times beside ``ts_ns`` in JSON, the
``metrics`` summary, ``logs --follow``, an empty result that says which filter emptied it, and
``fleetscope compare``. ``collector/cli.py`` holds the commands and calls these.

Everything reads through the query API (``fleetscope.collector.query``), as the dashboard does.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from fleetscope.cli.args import format_bytes, format_ns, time_ns, time_text
from fleetscope.cli.terminal import visible

# ------------------------------------------------------------------------------ output forms


def add_csv_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--csv", action="store_true", help="print CSV (a header row, then one row per line of the table)")


def print_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows as CSV on stdout; cells are written as given (no terminal escaping: CSV quotes them)."""
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(list(headers))
    for r in rows:
        w.writerow(["" if c is None else c for c in r])


def iso(ts_ns: int) -> str:
    """``2026-12-03T10:00:00.123456Z``: what JSON carries beside every ``ts_ns``."""
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def with_iso_times(doc: Any) -> Any:
    """A JSON-ready document with an ISO 8601 time (UTC) beside each integer ``*_ns`` time field:
    ``ts_ns`` gets ``ts``, ``last_seen_ns`` gets ``last_seen``, and so on (durations like
    ``clock_skew_ns`` are not times and are left alone)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out[k] = with_iso_times(v)
            if isinstance(k, str) and k.endswith("_ns") and _is_time_key(k) and isinstance(v, int) and not isinstance(v, bool):
                name = k[: -len("_ns")]
                if name not in doc and v > 0:
                    out[name] = iso(v)
        return out
    if isinstance(doc, list):
        return [with_iso_times(x) for x in doc]
    return doc


_TIME_WORDS = ("ts", "seen", "since", "until", "started", "ended", "start", "end", "received", "at", "step_ts", "first", "last")


def _is_time_key(key: str) -> bool:
    stem = key[: -len("_ns")]
    if stem.endswith(("skew", "duration", "span", "window", "after", "before", "gap", "step", "offset", "latency", "age")):
        return False
    return stem == "ts" or any(stem == w or stem.endswith("_" + w) or stem.startswith(w + "_") for w in _TIME_WORDS)


def print_json(doc: Any) -> None:
    from fleetscope.collector import query

    json.dump(with_iso_times(query.to_jsonable(doc)), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# ------------------------------------------------------------------------------ empty results


def explain_empty(what: str, flags: Sequence[str], has_rows: Callable[[int], bool], *, hint: str = "") -> str:
    """One line for an empty result that names the filter that emptied it. ``flags`` are the filters
    as typed, in the order they narrow; ``has_rows(k)`` says whether the query with only the first
    ``k`` of them has rows. The first filter after which nothing is left is named; when even none
    leaves nothing, the range itself holds no data, and ``hint`` says how to get some."""
    for k in range(len(flags) - 1, -1, -1):
        if has_rows(k):
            before = f" among the {what} with {' '.join(flags[:k])}" if k else ""
            after = f" (and {' '.join(flags[k + 1 :])} after it)" if k + 1 < len(flags) else ""
            return f"no {what}: {flags[k]} matched none{before} in that range{after}; without it there are some"
    scope = f" even without {' '.join(flags)}" if flags else ""
    return f"no {what} in that range{scope}{(': ' + hint) if hint else ''}"


# ------------------------------------------------------------------------------ metrics


def print_metrics_summary(s: Any, device_label: str) -> None:
    """The ``metrics`` table: one row per (host or GPU n, metric) with min, mean, max and last."""
    print(f"{visible(device_label)}: {s.host_samples} host samples, {s.gpu_samples} GPU samples "
          f"from {format_ns(s.since_ns)} to {format_ns(s.until_ns)} UTC")
    if not s.metrics:
        return
    rows = [metric_row(m) for m in s.metrics]
    headers = ["SCOPE", "METRIC", "MIN", "MEAN", "MAX", "LAST", "OF", "SAMPLES", "LAST AT"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(visible(c).ljust(w) for c, w in zip(r, widths)))


def metric_row(m: Any) -> list[str]:
    f = _formatter(m.unit)
    of = f(m.total) if m.total is not None else "-"
    if m.total and m.last is not None and m.unit == "bytes":
        of = f"{of} ({100.0 * m.last / m.total:.0f}% used)"
    return [m.scope, m.metric, f(m.min), f(m.mean), f(m.max), f(m.last), of, str(m.samples),
            format_ns(m.last_ts_ns) if m.last_ts_ns is not None else "-"]


def _formatter(unit: str) -> Callable[[float | None], str]:
    if unit == "bytes":
        return format_bytes

    def fmt(v: float | None) -> str:
        if v is None:
            return "-"
        suffix = "%" if unit == "%" else (f" {unit}" if unit else "")
        return f"{v:.1f}{suffix}" if unit not in ("MHz",) else f"{v:.0f}{suffix}"

    return fmt


def metrics_summary_csv(s: Any) -> None:
    print_csv(["scope", "metric", "unit", "min", "mean", "max", "last", "total", "samples", "last_ts_ns", "last_ts"],
              [[m.scope, m.metric, m.unit, m.min, m.mean, m.max, m.last, m.total, m.samples, m.last_ts_ns,
                iso(m.last_ts_ns) if m.last_ts_ns is not None else ""] for m in s.metrics])


# ------------------------------------------------------------------------------ metrics: hardware


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    rows = [[visible(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print(indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _n(v: float | None) -> str:
    return "-" if v is None else f"{int(v):,}"


def _of(used: float | None, limit: float | None, f: Callable[[float | None], str]) -> str:
    return "-" if used is None and limit is None else f"{f(used)} / {f(limit)}"


def _watts(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} W"


def _mib_s(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:,.1f} MiB/s"


def hardware_doc(gpus: Sequence[Any], board: Any | None) -> dict[str, Any]:
    """What ``metrics --json`` carries under "hardware": per GPU its processes, ECC, PCIe and
    limits; a Jetson's nvpmodel, EMC, engines, rails and sensors (null when not a Jetson)."""
    from fleetscope.collector import query

    return {"gpus": query.to_jsonable(list(gpus)), "jetson": query.to_jsonable(board) if board is not None else None}


def print_hardware(gpus: Sequence[Any], board: Any | None) -> None:
    """The ``metrics`` hardware section: what nvitop and jtop users look at, as of the range's end."""
    if not gpus and board is None:
        print("\nhardware: no readings up to the end of the range")
        return
    if gpus:
        newest = max(max(g.state_ts_ns or 0, g.sample_ts_ns or 0) for g in gpus)
        print(f"\nhardware: GPUs as of {format_ns(newest)} UTC")
        _text_table(
            ["GPU", "MEMORY", "POWER / LIMIT", "FAN", "PCIE", "PCIE RX", "PCIE TX", "ECC CORR (VOL/TOTAL)",
             "ECC UNCORR (VOL/TOTAL)", "RETIRED PAGES", "REMAPPED ROWS", "PROCESSES"],
            [[str(g.gpu_index), _of(g.memory_used_bytes, g.memory_total_bytes, format_bytes),
              _of(g.power_w, g.power_limit_w, _watts), "-" if g.fan_percent is None else f"{g.fan_percent:.0f}%",
              "-" if g.pcie_gen is None and g.pcie_width is None else f"Gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}",
              _mib_s(g.pcie_rx_bytes_per_s), _mib_s(g.pcie_tx_bytes_per_s),
              f"{_n(g.ecc_volatile_corrected)} / {_n(g.ecc_aggregate_corrected)}",
              f"{_n(g.ecc_volatile_uncorrected)} / {_n(g.ecc_aggregate_uncorrected)}",
              _n(g.retired_pages), _n(g.remapped_rows), "-" if g.processes is None else str(len(g.processes))]
             for g in gpus])
        procs = [p for g in gpus for p in (g.processes or ())]
        if procs:
            print("\n  compute processes (heaviest first on each GPU)")
            _text_table(["GPU", "PID", "PROCESS", "GPU MEMORY"],
                        [[str(p.gpu_index), str(p.pid), p.name, format_bytes(p.gpu_memory_bytes)] for p in procs])
    if board is not None:
        nvp = "-" if board.nvpmodel_id is None else str(board.nvpmodel_id) + (f" ({board.nvpmodel_mode})" if board.nvpmodel_mode else "")
        clocks = "-" if board.jetson_clocks is None else ("on" if board.jetson_clocks else "off")
        emc = "-" if board.emc_load_percent is None else f"{board.emc_load_percent:.0f}%"
        emc += "" if board.emc_mhz is None else f" at {board.emc_mhz:.0f} MHz"
        fan = "-" if board.fan_percent is None else f"{board.fan_percent:.0f}%"
        print(f"\nhardware: Jetson board as of {format_ns(board.ts_ns)} UTC")
        print(f"  nvpmodel {visible(nvp)} · jetson_clocks {clocks} · EMC {emc} · fan {fan}")
        if board.engines:
            print("  engines: " + ", ".join(
                f"{visible(e.name)} {f'{e.value:.0f} MHz' if e.value > 0 else 'off'}" for e in board.engines))
        if board.rails:
            _text_table(["RAIL", "POWER", "AVERAGE"],
                        [[r.name, f"{r.value:,.0f} mW", "-" if r.average is None else f"{r.average:,.0f} mW"]
                         for r in board.rails])
        if board.temps:
            print("  temperatures: " + ", ".join(f"{visible(t.name)} {t.value:.1f} C" for t in board.temps))


# ------------------------------------------------------------------------------ logs --follow


def follow_logs(args: argparse.Namespace, open_session: Any, print_line: Callable[[Any], None],
                *, poll_s: float = 1.0, stop: Callable[[], bool] = lambda: False) -> int:
    """Print new log events of the device as they arrive, until interrupted (Ctrl-C)."""
    from fleetscope.collector import query
    from fleetscope.collector.query.installs import search_logs_all_installs

    since = time_ns(args.since)
    seen: set[tuple[int, str, str]] = set()  # events at the newest printed time, to print each once
    while not stop():
        now = time.time_ns()
        with open_session(args.db) as session:
            lines = search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=now + 1,
                                      levels=[args.level] if args.level else None, text=args.grep, limit=args.limit)
        for ln in lines:
            key = (ln.ts_ns, ln.source, ln.message)
            if key in seen:
                continue
            if args.csv:
                print_csv_rows([[ln.ts_ns, iso(ln.ts_ns), ln.device, ln.level, ln.source, ln.message]])
            elif args.json:
                print(json.dumps(with_iso_times(query.to_jsonable(ln)), default=str))  # one object a line
            else:
                print_line(ln)
        if lines:
            newest = lines[-1].ts_ns
            seen = {(ln.ts_ns, ln.source, ln.message) for ln in lines if ln.ts_ns == newest}
            since = newest  # rows at the same time are caught by ``seen``
        sys.stdout.flush()
        time.sleep(poll_s)
    return 0


def print_csv_rows(rows: Sequence[Sequence[Any]]) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    for r in rows:
        w.writerow(["" if c is None else c for c in r])


# ------------------------------------------------------------------------------ compare


def register_compare(sub: Any, db_arg: Callable[[argparse.ArgumentParser], None], needs: Callable[[Any], Any]) -> None:
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
    p.set_defaults(func=needs(run_compare))


def run_compare(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.cli import _session
    from fleetscope.collector.errors import UnknownDevice

    names = list(dict.fromkeys(args.device))
    if len(names) < 2:
        print("fleetscope compare: name at least two devices (--device X --device Y)", file=sys.stderr)
        return 2
    since, until = time_ns(args.since), time_ns(args.until)
    with _session(args.db) as session:
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
        print_json({"since_ns": since, "until_ns": until, "operation": operation, "devices": figures})
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
