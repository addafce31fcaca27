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

New samples are read incrementally, from the tail and the chunks alike (one read for all
devices, ``read_new_sample_sums``), and summed into least-squares sums per device and fifth of the
window, added to the sums kept in the progress state; the fit adds the sums up, so no reading is
read twice. Top processes are read as rows (only the samples that carry the table). The latest
reading and the total, for the time to exhaustion, are read when a series is found growing.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    COUNT,
    MIB,
    NS,
    SUM,
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
    new_sample_groups,
    read_new_sample_sums,
    sample_rows,
)
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import gpu_state
from fleetscope.proto.vocabulary import (
    DEVICE_KIND_JETSON,
    KIND_MEMORY_GROWTH,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
)

NAME = KIND_MEMORY_GROWTH


def _fit_sums(column: str) -> Any:
    """n, sum x, sum y, sum x², sum xy, sum y² of the readings (x: seconds into the sub-window, y:
    the reading ``column`` in MiB), summed by ``read_new_sample_sums``."""

    def sums(v: dict[str, Any], x: Any) -> list[tuple[str, Any]]:
        y = v[column] / MIB
        return [(COUNT, y), (SUM, x), (SUM, y), (SUM, x * x), (SUM, x * y), (SUM, y * y)]

    return sums


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    window_ns = int(s.growth_window_s * NS)
    sub_ns = max(1, window_ns // 5)
    host_sums, host_marks = read_new_sample_sums(
        ctx,
        NAME,
        "host",
        [],
        ["mem_used_bytes"],
        _fit_sums("mem_used_bytes"),
        sub_ns,
        key="host",
        present=["mem_used_bytes"],
        first_lookback_s=s.growth_window_s,
    )
    servers = [d for d, dev in ctx.devices.items() if dev.kind != DEVICE_KIND_JETSON]
    gpu_sums, gpu_marks = read_new_sample_sums(
        ctx,
        NAME,
        "gpu",
        ["gpu_index"],
        ["memory_used_bytes"],
        _fit_sums("memory_used_bytes"),
        sub_ns,
        key="gpu",
        device_ids=servers,
        present=["memory_used_bytes"],
        first_lookback_s=s.growth_window_s,
    )
    # The top-process table is in a few samples only (the host sampler refreshes it every few).
    proc_groups = list(
        new_sample_groups(
            ctx,
            NAME,
            "host",
            [],
            texts=["top_processes"],
            present=["top_processes"],
            key="proc",
            first_lookback_s=s.growth_window_s,
        )
    )
    proc_rows, proc_marks = sample_rows(proc_groups, ["top_processes"])
    # A device that sends no process table (a Jetson's tegrastats, an agent with it off) would
    # keep its mark where it is and have every host sample since read again on every pass (every
    # chunk since decoded): its mark follows its newest host reading, read before, as every
    # sample up to it was read here too.
    for group in proc_groups:
        for d, start in group.starts.items():
            newest = host_marks.get(d)
            if newest is not None and newest > proc_marks.get(d, start):
                proc_marks[d] = newest
    del proc_groups
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
    big = sorted((p for p in procs if (p.get("rss_bytes") or 0) >= min_bytes), key=lambda p: -p["rss_bytes"])[
        :most
    ]
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
            ch.ops.append(
                Resolve(
                    cur.id, int(v.get("last_ns") or ctx.now_ns), facts=dict(cur.facts, resolved="no readings")
                )
            )
        return
    rate = f.slope_per_s * 60 * MIB  # bytes per minute
    rise = f.slope_per_s * min(f.span_s, window_ns / NS) * MIB
    growing = rate >= s.growth_min_rate and f.r2 >= s.growth_min_r2 and rise >= s.growth_min_rise
    if growing:
        what = {"host": "host memory"}.get(name) or (
            f"GPU {gpu} memory" if gpu is not None else f"process {v.get('name')} ({pid})"
        )
        last, total, avail = _latest(ctx, d, gpu, pid, v)
        left = (total - last) if total else (avail if pid is not None else None)
        tte = left / rate * 60 if left is not None and rate > 0 else None
        facts: dict[str, Any] = {
            "what": what,
            "series": name,
            "slope_bytes_per_min": round(rate),
            "slope_mib_per_min": round(rate / MIB, 2),
            "r2": round(f.r2, 4),
            "window_s": s.growth_window_s,
            "points": f.n,
            "current_bytes": int(last),
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
            own = hint_math.hint(
                f"{what} growing at {rate / MIB:.0f} MiB/min (R² {f.r2:.2f})",
                kind=KIND_MEMORY_GROWTH,
                **{k: facts[k] for k in ("slope_mib_per_min", "r2", "time_to_exhaustion_s")},
            )
            hints = [own, *hint_math.hints_for(ctx.conn, d, ctx.now_ns, s, exclude=KIND_MEMORY_GROWTH)]
            ch.ops.append(
                Open(
                    key,
                    f.first_ns,
                    severity,
                    title,
                    facts,
                    last_seen_ns=int(v.get("last_ns") or ctx.now_ns),
                    hints=hints,
                    pid=pid,
                    process_name=v.get("name") or "",
                )
            )
        else:
            ch.ops.append(
                Refresh(
                    cur.id, int(v.get("last_ns") or ctx.now_ns), facts=facts, title=title, severity=severity
                )
            )
    elif cur is not None and (rate < s.growth_min_rate / 2 or f.r2 < s.growth_min_r2 - 0.2 or gone):
        ch.ops.append(
            Resolve(
                cur.id,
                int(v.get("last_ns") or ctx.now_ns),
                facts=dict(
                    cur.facts, resolved_slope_mib_per_min=round(rate / MIB, 2), resolved_r2=round(f.r2, 4)
                ),
            )
        )


def _latest(
    ctx: PassContext, d: int, gpu: int | None, pid: int | None, v: dict
) -> tuple[float, float | None, float | None]:
    """(the series' latest reading, its total, the host's available memory), read when a series
    is found growing (the sums carry no single reading): the newest sample up to now that has it,
    in the tail or in the chunks."""
    if pid is not None:  # a process: its RSS, kept as it was read; the host's available memory
        host = _newest(
            ctx, "host", d, None, "mem_used_bytes", ("mem_available_bytes",), int(v.get("last_ns") or 0)
        )
        avail = None if host is None else host["mem_available_bytes"]
        return float(v.get("last") or 0.0), None, avail
    if gpu is None:
        host = _newest(
            ctx, "host", d, None, "mem_used_bytes", ("mem_total_bytes",), int(v.get("last_ns") or 0)
        )
        if host is None:
            return 0.0, None, None
        return float(host["mem_used_bytes"] or 0.0), host["mem_total_bytes"], None
    got = _newest(ctx, "gpu", d, gpu, "memory_used_bytes", (), int(v.get("last_ns") or 0))
    st = gpu_state.c
    top = ctx.conn.execute(
        select(func.max(st.memory_total_bytes)).where(st.device_id == d, st.gpu_index == gpu)
    ).scalar()
    return float(got["memory_used_bytes"] or 0.0) if got else 0.0, float(top) if top else None, None


def _newest(
    ctx: PassContext, kind: str, d: int, gpu: int | None, column: str, others: tuple[str, ...], since_ns: int
) -> dict[str, float | None] | None:
    """The readings of the newest sample of device ``d`` (GPU ``gpu``) up to now that carries
    ``column``: read from ``since_ns`` (the series' newest reading, so usually one sample's worth),
    further back only where nothing there has it. None: no such sample within the lookback."""
    import numpy as np

    hi = ctx.now_ns + 1
    lo = min(since_ns, ctx.now_ns) if since_ns else ctx.now_ns - int(ctx.settings.growth_window_s * NS)
    floor = ctx.now_ns - int(max(ctx.settings.lookback_s, 2 * ctx.settings.growth_window_s) * NS)
    while True:
        rows = read_samples(ctx.conn, kind, [d], lo, hi, columns=(column, *others), gpu_index=gpu)
        has = np.flatnonzero(~np.isnan(rows.values[column])) if len(rows) else np.empty(0, dtype=np.int64)
        if has.size:
            i = int(has[-1])  # sorted by time: the newest
            return {name: rows.value(name, i) for name in (column, *others)}
        if lo <= floor:
            return None
        hi, lo = lo, max(floor, ctx.now_ns - max(2 * (ctx.now_ns - lo), 60 * NS))
