"""``fleetscope metrics``: a device's host and GPU samples over a range: the summary table (min, mean,
max, last per metric), the hardware view (what nvitop and jtop show), every sample with ``--raw``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from fleetscope.cli.args import format_bytes, format_ns, time_ns, time_text
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    db_arg,
    fmt_value,
    iso,
    needs_collector,
    open_session,
    print_csv,
    print_json_with_times,
    table,
    unknown_device,
)


def register(sub: Any) -> None:
    p = sub.add_parser("metrics", help="a device's host and GPU samples over a time range")
    db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--since", default="1h", type=time_text, help="start: a duration ago (1h, 7d) or a time (ISO 8601); default 1h")
    p.add_argument("--until", default="now", type=time_text, help="end: a time or a duration ago; default now")
    p.add_argument("--limit", type=int, default=200_000, help="most rows per table (default %(default)s)")
    p.add_argument("--raw", action="store_true", help="every sample too, not only min/mean/max/last per metric")
    p.set_defaults(func=needs_collector(run_metrics))


def run_metrics(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice
    from fleetscope.collector.query.devices import device_installs
    from fleetscope.collector.query.samples import metrics_summary

    since, until = time_ns(args.since), time_ns(args.until)
    with open_session(args.db) as session:
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
            return unknown_device(exc)
    if args.json:
        assert m is not None
        # An ISO 8601 time (UTC) beside every *_ns time: "ts" beside "ts_ns".
        print_json_with_times({**query.to_jsonable(m), "installs": [d.agent_id for d in installs], "summary": summary.metrics,
                                 "hardware": hardware_doc(hw_gpus, hw_board)})
        return 0
    if args.csv:
        if args.raw:
            assert m is not None
            _metrics_raw_csv(m)
        else:
            metrics_summary_csv(summary)
        if not summary.host_samples and not summary.gpu_samples:
            print(_no_samples(args, installs, since, until), file=sys.stderr)
        return 0
    label_ = installs[0].name + (f" ({len(installs)} installs)" if len(installs) > 1 else "")
    print_metrics_summary(summary, label_)
    if not summary.host_samples and not summary.gpu_samples:
        print(_no_samples(args, installs, since, until))
        return 0
    print_hardware(hw_gpus, hw_board)
    if m is not None:
        if m.host:
            rows = [[format_ns(p.ts_ns), fmt_value(p.values["cpu_percent"], "%"), fmt_value(p.values["load1"]),
                     format_bytes(p.values["mem_used_bytes"]), format_bytes(p.values["mem_total_bytes"]),
                     format_bytes(p.values["swap_used_bytes"])] for p in m.host]
            print(f"\nhost ({len(m.host)} samples)")
            table(["TIME", "CPU", "LOAD1", "MEM USED", "MEM TOTAL", "SWAP USED"], rows)
        if m.gpu:
            rows = [[format_ns(p.ts_ns), str(p.gpu_index), fmt_value(p.values["util_gpu_percent"], "%"),
                     format_bytes(p.values["memory_used_bytes"]), fmt_value(p.values["temp_c"], " C"),
                     fmt_value(p.values["power_w"], " W"), fmt_value(p.values["sm_clock_mhz"], " MHz")] for p in m.gpu]
            print(f"\nGPU ({len(m.gpu)} samples)")
            table(["TIME", "GPU", "UTIL", "MEM USED", "TEMP", "POWER", "SM CLOCK"], rows)
    else:
        print("\n--raw lists every sample; --json and --csv give the figures to programs")
    return 0


def _no_samples(args: argparse.Namespace, installs: list[Any], since: int, until: int) -> str:
    """Why ``metrics`` found nothing: the range (the device's samples end or start elsewhere), or no samples at all."""
    from fleetscope.collector.query.samples import last_sample_ns

    with open_session(args.db) as session:
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
        rows += [[p.ts_ns, iso(p.ts_ns), "host", k, v] for k, v in p.values.items() if v is not None]
    for p in m.gpu:
        rows += [[p.ts_ns, iso(p.ts_ns), f"GPU {p.gpu_index}", k, v] for k, v in p.values.items() if v is not None]
    rows.sort(key=lambda r: r[0])
    print_csv(["ts_ns", "ts", "scope", "metric", "value"], rows)




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

