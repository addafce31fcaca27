"""``fleetscope incidents`` (a list, newest first) and ``fleetscope incident ID`` (one whole: facts,
a text chart of the device around it, hints, log lines)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from fleetscope.cli.args import duration_ns, format_ago, format_bytes, format_ns, label, time_ns, time_text
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    db_arg,
    explain_empty,
    needs_collector,
    open_session,
    print_empty,
    print_json,
    table,
    unknown_device,
)

if TYPE_CHECKING:  # the parser is built without SQLAlchemy; only type checkers see these
    from fleetscope.collector.query import IncidentContext


def register(sub: Any) -> None:
    p = sub.add_parser("incidents", help="OOM, Xid, TensorRT, latency and other incidents",
                       description="Incidents whose span (start to last occurrence) overlaps the range, newest first. "
                                   "Repeats of one failure are one incident with a count.")
    db_arg(p)
    p.add_argument("--device", help="only this device (a name: every install of it; an agent id: one)")
    p.add_argument("--kind", action="append", default=[], metavar="KIND",
                   help="only this kind (cuda_oom, host_oom, gpu_xid, tensorrt_error, ...); repeat for several")
    p.add_argument("--open", action="store_true", help="only open incidents (not yet resolved)")
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="only devices with this label (repeat: all must match)")
    p.add_argument("--since", default="7d", type=time_text, help="start (default 7d ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.add_argument("--limit", type=int, default=1000, help="most incidents, newest first (default %(default)s)")
    p.set_defaults(func=needs_collector(run_incidents))

    p = sub.add_parser("incident", help="one incident whole: facts, context chart, hints, log lines",
                       description="One incident: its lifecycle and facts, a text chart of the device around it "
                                   "(GPU memory, temperature, clocks, host memory), its hints and the log lines near it.")
    p.add_argument("id", metavar="ID", help="the incident's id (the ID column of 'fleetscope incidents')")
    db_arg(p)
    p.add_argument("--before", type=duration_ns, default=300 * 10**9, metavar="DURATION",
                   help="how much of the device before it to show (default 5m)")
    p.add_argument("--after", type=duration_ns, default=300 * 10**9, metavar="DURATION",
                   help="and after its last occurrence (default 5m)")
    p.set_defaults(func=needs_collector(run_incident))


def run_incidents(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.errors import UnknownDevice, UnknownIncidentKind

    now = time.time_ns()
    kinds = list(dict.fromkeys(args.kind)) or None
    labels: dict[str, str] = dict(args.label) or {}
    with open_session(args.db) as session:
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

                empty = explain_empty("incidents", [s[0] for s in steps], has_rows)
        except UnknownDevice as exc:
            return unknown_device(exc)
        except UnknownIncidentKind as exc:
            print(f"fleetscope incidents: {visible(str(exc))}", file=sys.stderr)
            return 2
    if args.json:  # the incidents with their facts; the device around one: `fleetscope incident ID --json`
        print_json({"incidents": [query.to_jsonable(i) for i in incidents]})
        return 0
    headers = ["ID", "STARTED", "LAST SEEN", "DEVICE", "KIND", "STATE", "COUNT", "SEVERITY", "TITLE"]
    if empty:
        print_empty(visible(empty), headers)
        return 0
    table(headers,
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
    with open_session(args.db) as session:
        try:
            ctx = query.incident_with_context(session=session, incident_id=incident_id, before_s=args.before / 1e9,
                                              after_s=args.after / 1e9, log_window_s=60, log_limit=200)
        except UnknownIncident as exc:
            print(f"fleetscope incident: {visible(str(exc))}", file=sys.stderr)
            return 1
    if args.json:
        doc = _incident_json(ctx)
        doc["context"]["nearby"] = query.to_jsonable(ctx.nearby)
        print_json(doc)
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
    """``incident ID --json``: the incident's fields (as ``incidents --json`` lists them) and, under
    "context", the device around it."""
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
