"""Memory growth: host memory, each GPU's memory, or a process's resident memory rising steadily
over ``growth_window_s``.

Steadily means a least-squares line through the window's readings with a fit quality R^2 of at
least ``growth_min_r2``, a slope of at least ``growth_min_rate`` bytes/min and a total rise of at
least ``growth_min_rise``. The incident names the slope (bytes and MiB per minute) and the time
to exhaustion at that slope (what is left of the GPU's memory, or of the host's available
memory for host and process growth). It resolves when the fit no longer holds (slope under half
the threshold, or R^2 well under it) or the process is gone.

Processes come from the host sampler's top-process table (``host_samples.top_processes``): those
of at least ``growth_process_min_bytes``, the ``growth_max_processes`` largest per device, keyed by
pid. A Jetson's GPU memory is its RAM (unified memory), so only its host memory is followed.

New samples are read incrementally and summed in the database into least-squares sums per
device and fifth of the window (one GROUP BY over all devices, ``read_new_sums``), added to the
sums kept in the progress state; the fit adds the sums up, so no reading is read twice. Top
processes are read as rows (only the samples that carry the table). The latest reading and the
total, for the time to exhaustion, are read when a series is found growing.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Float, cast, func, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    MIB,
    NS,
    Changes,
    Fit,
    Open,
    PassContext,
    Refresh,
    Resolve,
    add_point,
    add_sums,
    fit,
    fmt_duration,
    read_new_rows,
    read_new_sums,
)
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import gpu_samples, gpu_state, host_samples
from fleetscope.proto.vocabulary import (
    DEVICE_KIND_JETSON,
    KIND_MEMORY_GROWTH,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
)

NAME = KIND_MEMORY_GROWTH


def _fit_sums(c: Any, x: Any, y: Any) -> list[Any]:
    """n, sum x, sum y, sum x², sum xy, sum y² of the readings (x: seconds into the sub-window, y: MiB)."""
    return [func.count(y), func.sum(x), func.sum(y), func.sum(x * x), func.sum(x * y), func.sum(y * y)]


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    window_ns = int(s.growth_window_s * NS)
    sub_ns = max(1, window_ns // 5)
    host_sums, host_marks = read_new_sums(
        ctx, NAME, host_samples, [],
        lambda c, x: _fit_sums(c, x, cast(c.mem_used_bytes, Float) / MIB), sub_ns, key="host",
        where=[host_samples.c.mem_used_bytes.is_not(None)], first_lookback_s=s.growth_window_s,
    )
    servers = [d for d, dev in ctx.devices.items() if dev.kind != DEVICE_KIND_JETSON]
    gpu_sums, gpu_marks = read_new_sums(
        ctx, NAME, gpu_samples, ["gpu_index"],
        lambda c, x: _fit_sums(c, x, cast(c.memory_used_bytes, Float) / MIB), sub_ns, key="gpu",
        device_ids=servers, where=[gpu_samples.c.memory_used_bytes.is_not(None)], first_lookback_s=s.growth_window_s,
    )
    # The top-process table is in a few samples only (the host sampler refreshes it every few).
    proc_rows, proc_marks = read_new_rows(
        ctx, NAME, host_samples, ["top_processes"], key="proc", where=[host_samples.c.top_processes.is_not(None)],
        first_lookback_s=s.growth_window_s,
    )
    keep_from = ctx.now_ns - window_ns
    keep_from -= keep_from % sub_ns
    for d in set(host_marks) | set(gpu_marks) | set(proc_marks):
        _, state = ctx.mark(NAME, d)
        series: dict[str, dict[str, Any]] = state.get("series", {})
        for _dev, start, *sums, newest in host_sums.get(d, []):
            h = series.setdefault("host", {"subs": []})
            add_sums(h["subs"], start, sums)
            h["last_ns"] = max(int(h.get("last_ns") or 0), newest)
        for _dev, ts, procs in proc_rows.get(d, []):
            _add_processes(series, ts, procs, sub_ns, s.growth_process_min_bytes, s.growth_max_processes)
        for _dev, gpu, start, *sums, newest in gpu_sums.get(d, []):
            g = series.setdefault(f"gpu{gpu}", {"subs": []})
            add_sums(g["subs"], start, sums)
            g["last_ns"] = max(int(g.get("last_ns") or 0), newest)
        for k in list(series):
            series[k]["subs"] = [x for x in series[k]["subs"] if x[0] >= keep_from]
        for k, v in list(series.items()):
            _judge(ctx, ch, d, k, v, sub_ns)
            if not v["subs"]:
                del series[k]
        state["series"] = series
        state.pop("avail", None)
        for key, marks in (("host", host_marks), ("gpu", gpu_marks), ("proc", proc_marks)):
            if d in marks:
                ch.set_progress(d, key, marks[d])
        until = max(host_marks.get(d, 0), gpu_marks.get(d, 0), proc_marks.get(d, 0))
        ch.set_progress(d, "", until, state)
    return ch


def _add_processes(series: dict, ts: int, procs_json: str, sub_ns: int, min_bytes: float, most: int) -> None:
    try:
        procs = json.loads(procs_json)
    except ValueError:
        return
    big = sorted((p for p in procs if (p.get("rss_bytes") or 0) >= min_bytes), key=lambda p: -p["rss_bytes"])[:most]
    for p in big:
        e = series.setdefault(f"proc{p['pid']}", {"subs": [], "name": p.get("name") or ""})
        add_point(e["subs"], ts, p["rss_bytes"] / MIB, sub_ns)
        e.update(last=p["rss_bytes"], last_ns=ts)


def _judge(ctx: PassContext, ch: Changes, d: int, name: str, v: dict, sub_ns: int) -> None:
    s = ctx.settings
    window_ns = int(s.growth_window_s * NS)
    gpu = int(name[3:]) if name.startswith("gpu") else None
    pid = int(name[4:]) if name.startswith("proc") else None
    group = "host" if name == "host" else ("gpu" if gpu is not None else f"proc:{pid}")
    key = DerivedKey(d, KIND_MEMORY_GROWTH, gpu, group)
    cur = ctx.open.get(key)
    f: Fit | None = fit(v["subs"], sub_ns) if v["subs"] else None
    gone = not v["subs"] or (v.get("last_ns") or 0) < ctx.now_ns - window_ns
    if f is None or f.n < s.growth_min_points or f.span_s < 0.6 * window_ns / NS:
        if cur is not None and gone:
            ch.ops.append(Resolve(cur.id, int(v.get("last_ns") or ctx.now_ns), facts=dict(cur.facts, resolved="no readings")))
        return
    rate = f.slope_per_s * 60 * MIB  # bytes per minute
    rise = f.slope_per_s * min(f.span_s, window_ns / NS) * MIB
    growing = rate >= s.growth_min_rate and f.r2 >= s.growth_min_r2 and rise >= s.growth_min_rise
    if growing:
        what = {"host": "host memory"}.get(name) or (f"GPU {gpu} memory" if gpu is not None else f"process {v.get('name')} ({pid})")
        last, total, avail = _latest(ctx, d, gpu, pid, v)
        left = (total - last) if total else (avail if pid is not None else None)
        tte = left / rate * 60 if left is not None and rate > 0 else None
        facts: dict[str, Any] = {
            "what": what, "series": name, "slope_bytes_per_min": round(rate), "slope_mib_per_min": round(rate / MIB, 2),
            "r2": round(f.r2, 4), "window_s": s.growth_window_s, "points": f.n, "current_bytes": int(last),
            "total_bytes": None if total is None else int(total),
            "time_to_exhaustion_s": None if tte is None else round(tte, 1),
        }
        if gpu is not None:
            facts["gpu_index"] = gpu
        if pid is not None:
            facts.update(pid=pid, process_name=v.get("name") or "")
        title = f"{what} on {ctx.devices[d].name} growing at {rate / MIB:.0f} MiB/min"
        if tte is not None:
            title += f", exhausted in ~{fmt_duration(tte)}"
        severity = SEVERITY_ERROR if tte is not None and tte < 600 else SEVERITY_WARNING
        if cur is None:
            own = hint_math.hint(f"{what} growing at {rate / MIB:.0f} MiB/min (R² {f.r2:.2f})", kind=KIND_MEMORY_GROWTH,
                                 **{k: facts[k] for k in ("slope_mib_per_min", "r2", "time_to_exhaustion_s")})
            hints = [own, *hint_math.hints_for(ctx.conn, d, ctx.now_ns, s, exclude=KIND_MEMORY_GROWTH)]
            ch.ops.append(Open(key, f.first_ns, severity, title, facts, last_seen_ns=int(v.get("last_ns") or ctx.now_ns),
                               hints=hints, pid=pid, process_name=v.get("name") or ""))
        else:
            ch.ops.append(Refresh(cur.id, int(v.get("last_ns") or ctx.now_ns), facts=facts, title=title, severity=severity))
    elif cur is not None and (rate < s.growth_min_rate / 2 or f.r2 < s.growth_min_r2 - 0.2 or gone):
        ch.ops.append(Resolve(cur.id, int(v.get("last_ns") or ctx.now_ns),
                              facts=dict(cur.facts, resolved_slope_mib_per_min=round(rate / MIB, 2), resolved_r2=round(f.r2, 4))))


def _latest(ctx: PassContext, d: int, gpu: int | None, pid: int | None, v: dict) -> tuple[float, float | None, float | None]:
    """(the series' latest reading, its total, the host's available memory), read when a series
    is found growing (the sums carry no single reading)."""
    h = host_samples.c
    host = ctx.conn.execute(
        select(h.mem_used_bytes, h.mem_total_bytes, h.mem_available_bytes)
        .where(h.device_id == d, h.ts_ns <= ctx.now_ns, h.mem_used_bytes.is_not(None))
        .order_by(h.ts_ns.desc()).limit(1)
    ).first()
    used, total, avail = (None, None, None) if host is None else host
    avail = None if avail is None else float(avail)
    if pid is not None:  # a process: its RSS, kept as it was read
        return float(v.get("last") or 0.0), None, avail
    if gpu is None:
        return float(used or 0.0), None if total is None else float(total), avail
    g, st = gpu_samples.c, gpu_state.c
    got = ctx.conn.execute(
        select(g.memory_used_bytes)
        .where(g.device_id == d, g.gpu_index == gpu, g.ts_ns <= ctx.now_ns, g.memory_used_bytes.is_not(None))
        .order_by(g.ts_ns.desc()).limit(1)
    ).scalar()
    top = ctx.conn.execute(
        select(func.max(st.memory_total_bytes)).where(st.device_id == d, st.gpu_index == gpu)
    ).scalar()
    return float(got or 0.0), float(top) if top else None, avail
