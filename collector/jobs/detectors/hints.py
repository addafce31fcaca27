"""Root-cause hints: what else was true on a device around an incident's time, computed from the
stored data, never canned.

``hints_for(conn, device_id, ts_ns, settings)`` looks at the minutes before ``ts_ns`` and returns
``[{"text": ..., "facts": {...}}]``, strongest first:

* thermal or power throttling in NVML's clock-event reasons (hottest temperature, SM clock against
  the GPU's maximum), and throttling a detector recorded (Jetson, from tegrastats);
* a saturated host CPU (the mean over the two minutes before);
* memory growing before it (a least-squares fit of host and per-GPU memory over the growth window;
  "OOM 2 min after GPU 0 memory began growing at 120 MiB/min"), or a memory-growth
  incident open at the time;
* latency incidents open at the time ("p99 of infer 3.1x baseline") and a starved GPU.

Each hint reads one device's raw rows of a few minutes (the growth window at most), from the tail
and from the chunks alike (``storage.chunk_reader``): an incident whose hour was already folded
gets the same hints. They are computed when an incident opens (and for event incidents, once, by
the lifecycle step, or later for an imported or late incident), never per pass.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, or_, select

from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.storage.chunk_reader import read_gpu_chunk_rows, read_host_chunk_rows
from fleetscope.collector.storage.schema import Incident, gpu_samples, gpu_state, host_samples
from fleetscope.proto.vocabulary import (
    KIND_GPU_STARVED,
    KIND_GPU_THROTTLING,
    KIND_LATENCY_REGRESSION,
    KIND_LATENCY_SLO,
    KIND_MEMORY_GROWTH,
    POWER_THROTTLE_MASK,
    THERMAL_THROTTLE_MASK,
)

NS = 10**9
MIB = 1 << 20
NEAR_S = 120.0  # "around that time": the two minutes before


def hint(text: str, **facts: Any) -> dict[str, Any]:
    return {"text": text, "facts": facts}


def hints_for(
    conn: Connection, device_id: int, ts_ns: int, settings: DetectorSettings, *, exclude: str | None = None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if exclude != KIND_GPU_THROTTLING:
        out += _nvml_throttling(conn, device_id, ts_ns)
    out += _incidents_at(conn, device_id, ts_ns, exclude, skip_throttling=bool(out))
    cpu = _cpu(conn, device_id, ts_ns, settings)
    if cpu is not None:
        out.append(cpu)
    if exclude != KIND_MEMORY_GROWTH and not any(h["facts"].get("kind") == KIND_MEMORY_GROWTH for h in out):
        out += _memory_growth_before(conn, device_id, ts_ns, settings)
    return out


def _raw(conn: Connection, gpu: bool, device_id: int, lo: int, hi: int, columns: tuple[str, ...]) -> Any:
    """One device's raw rows with ``lo <= ts_ns <= hi``, tail and chunks merged, in columns:
    ``(ts_ns, gpu_index (GPU rows), {column: float64 with NaN for NULL})`` as numpy arrays."""
    import numpy as np

    table = gpu_samples if gpu else host_samples
    c = table.c
    keys = [c.ts_ns, *([c.gpu_index] if gpu else [])]
    tail = conn.execute(
        select(*keys, *(c[name] for name in columns)).where(c.device_id == device_id, c.ts_ns >= lo, c.ts_ns <= hi)
    ).all()
    if gpu:
        chunked = read_gpu_chunk_rows(conn, [device_id], lo, hi + 1, columns=columns)
    else:
        chunked = read_host_chunk_rows(conn, [device_id], lo, hi + 1, columns=columns, texts=())
    skip = len(keys)
    ts = np.concatenate([np.array([r[0] for r in tail], dtype=np.int64), chunked.ts_ns])
    gpus = np.concatenate([np.array([r[1] for r in tail], dtype=np.int64), chunked.gpu_index]) if gpu else None
    values = {
        name: np.concatenate([
            np.array([np.nan if r[skip + i] is None else float(r[skip + i]) for r in tail], dtype=np.float64),
            chunked.values[name],
        ])
        for i, name in enumerate(columns)
    }
    return ts, gpus, values


def _nvml_throttling(conn: Connection, device_id: int, ts_ns: int) -> list[dict[str, Any]]:
    import numpy as np

    lo = ts_ns - int(NEAR_S * NS)
    ts, gpus, v = _raw(conn, True, device_id, lo, ts_ns, ("throttle_reasons", "temp_c", "sm_clock_mhz"))
    known = ~np.isnan(v["throttle_reasons"])
    reasons = np.where(known, v["throttle_reasons"], 0).astype(np.int64)
    thermal = (reasons & THERMAL_THROTTLE_MASK) != 0
    power = (reasons & POWER_THROTTLE_MASK) != 0
    out = []
    for gpu in sorted(set(gpus[thermal | power].tolist())):
        sel = (gpus == gpu) & (thermal | power)
        n_thermal, n_power = int(np.count_nonzero(thermal & sel)), int(np.count_nonzero(power & sel))
        temps, clocks = v["temp_c"][sel], v["sm_clock_mhz"][sel]
        temp = float(np.nanmax(temps)) if not np.isnan(temps).all() else None
        clock = float(np.nanmin(clocks)) if not np.isnan(clocks).all() else None
        cause = "thermally" if n_thermal >= n_power else "power"
        max_clock = _max_clock(conn, device_id, gpu)
        text = f"GPU {gpu} was {cause} throttled"
        facts: dict[str, Any] = {"kind": KIND_GPU_THROTTLING, "gpu_index": gpu, "cause": cause.replace("ally", "al"),
                                 "samples": n_thermal + n_power}
        if temp is not None:
            text += f" at {temp:.0f} °C"
            facts["temp_c"] = temp
        if clock is not None and max_clock:
            loss = max(0.0, 1.0 - clock / max_clock) * 100
            text += f", SM clock {loss:.0f} % below max"
            facts.update(sm_clock_mhz=clock, sm_clock_max_mhz=max_clock, clock_loss_percent=round(loss, 1))
        out.append(hint(text, **facts))
    return out


def _max_clock(conn: Connection, device_id: int, gpu: int) -> float | None:
    s = gpu_state.c
    got = conn.execute(
        select(func.max(s.sm_clock_max_mhz)).where(s.device_id == device_id, s.gpu_index == gpu)
    ).scalar()
    return float(got) if got else None


def _incidents_at(
    conn: Connection, device_id: int, ts_ns: int, exclude: str | None, *, skip_throttling: bool
) -> list[dict[str, Any]]:
    """Derived incidents open on the device at ``ts_ns`` (or within the two minutes before)."""
    i = Incident.__table__.c
    kinds = [KIND_GPU_THROTTLING, KIND_MEMORY_GROWTH, KIND_LATENCY_REGRESSION, KIND_LATENCY_SLO, KIND_GPU_STARVED]
    kinds = [k for k in kinds if k != exclude and not (skip_throttling and k == KIND_GPU_THROTTLING)]
    rows = conn.execute(
        select(i.kind, i.gpu_index, i.facts, i.ts_ns).where(
            i.device_id == device_id,
            i.kind.in_(kinds),
            i.ts_ns <= ts_ns,
            or_(i.ended_ns.is_(None), i.ended_ns >= ts_ns - int(NEAR_S * NS)),
        ).order_by(i.ts_ns.desc()).limit(10)
    ).all()
    out = []
    seen: set[tuple[str, Any]] = set()
    for kind, gpu, facts, started in rows:
        facts = facts if isinstance(facts, dict) else {}
        key = (kind, gpu if gpu is not None else facts.get("operation") or facts.get("series"))
        if key in seen:
            continue
        seen.add(key)
        text = _incident_text(kind, gpu, facts, ts_ns - started)
        if text:
            plain = {k: v for k, v in facts.items() if not isinstance(v, (dict, list))}
            plain.update(kind=kind, gpu_index=gpu)
            out.append(hint(text, **plain))
    return out


def _incident_text(kind: str, gpu: int | None, f: dict[str, Any], since_ns: int) -> str | None:
    if kind == KIND_GPU_THROTTLING:
        text = f"GPU {gpu} was {f.get('cause', 'thermal')}ly throttled"
        if f.get("peak_temp_c") is not None:
            text += f" at {f['peak_temp_c']:.0f} °C"
        if f.get("clock_loss_percent") is not None:
            text += f", SM clock {f['clock_loss_percent']:.0f} % below max"
        return text.replace("thermally", "thermally").replace("powerly", "power")
    if kind == KIND_MEMORY_GROWTH and f.get("slope_mib_per_min") is not None:
        return (f"{f.get('what', 'memory')} had been growing at {f['slope_mib_per_min']:.0f} MiB/min "
                f"for {max(0, since_ns) / NS / 60:.0f} min")
    if kind == KIND_LATENCY_REGRESSION and f.get("ratio") is not None:
        return f"p99 of {f.get('operation')} {f['ratio']:.1f}x baseline ({f.get('p99_ms')} ms vs {f.get('baseline_p99_ms')} ms)"
    if kind == KIND_LATENCY_SLO and f.get("p99_ms") is not None:
        return f"p99 of {f.get('operation')} {f['p99_ms']} ms, above its {f.get('objective_p99_ms')} ms objective"
    if kind == KIND_GPU_STARVED:
        text = f"GPU {gpu} starved ({f.get('util_percent', 0):.0f} % busy)"
        if f.get("data_wait_ratio") is not None:
            text += f" while waiting on data {100 * f['data_wait_ratio']:.0f} % of the time"
        return text
    return None


def _cpu(conn: Connection, device_id: int, ts_ns: int, settings: DetectorSettings) -> dict[str, Any] | None:
    import numpy as np

    _ts, _g, v = _raw(conn, False, device_id, ts_ns - int(NEAR_S * NS), ts_ns, ("cpu_percent",))
    cpu = v["cpu_percent"][~np.isnan(v["cpu_percent"])]
    if not cpu.size:
        return None
    avg = float(cpu.mean())
    if avg < settings.starved_cpu_percent:
        return None
    return hint(f"host CPU saturated ({avg:.0f} % on average over the {NEAR_S / 60:.0f} min before)",
                cpu_percent=round(avg, 1), window_s=NEAR_S)


def _memory_growth_before(
    conn: Connection, device_id: int, ts_ns: int, settings: DetectorSettings
) -> list[dict[str, Any]]:
    """Least squares over the growth window before ``ts_ns``: host memory and each GPU's."""
    import numpy as np

    lo = ts_ns - int(settings.growth_window_s * NS)
    out = []
    for gpu_rows, column in ((True, "memory_used_bytes"), (False, "mem_used_bytes")):
        ts_all, gpus_all, v = _raw(conn, gpu_rows, device_id, lo, ts_ns, (column,))
        present = ~np.isnan(v[column])
        groups = sorted(set(gpus_all[present].tolist())) if gpu_rows else [None]
        for gpu in groups:
            sel = present & (gpus_all == gpu) if gpu_rows else present
            n = int(np.count_nonzero(sel))
            if not n or n < settings.growth_min_points:
                continue
            ts = ts_all[sel]
            x = (ts - lo).astype(np.float64) / 1e9
            y = v[column][sel] / MIB
            sx, sy, sxx, sxy, syy = float(x.sum()), float(y.sum()), float((x * x).sum()), float((x * y).sum()), float((y * y).sum())
            vx, vy, cov = n * sxx - sx * sx, n * syy - sy * sy, n * sxy - sx * sy
            if vx <= 0 or vy <= 0:
                continue
            slope_min = cov / vx * 60  # MiB per minute
            r2 = cov * cov / (vx * vy)
            if slope_min * MIB < settings.growth_min_rate or r2 < settings.growth_min_r2:
                continue
            # When it began: the lowest reading in the window (the earliest of equals), the foot of the climb.
            order = np.lexsort((ts, y))
            onset = int(ts[order[0]])
            what = f"GPU {gpu} memory" if gpu is not None else "host memory"
            mins = max(0.0, (ts_ns - onset) / NS / 60)
            out.append(hint(f"{mins:.0f} min after {what} began growing at {slope_min:.0f} MiB/min",
                            kind=KIND_MEMORY_GROWTH, what=what, gpu_index=gpu, slope_mib_per_min=round(slope_min, 1),
                            r2=round(r2, 3), onset_ns=onset, minutes_before=round(mins, 1)))
    return out
