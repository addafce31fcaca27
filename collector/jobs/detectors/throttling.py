"""GPU throttling sustained for ``throttle_min_s``, with the clock it cost.

A sample is throttled when:

* a server (NVML): its clock-event reasons (``gpu_samples.throttle_reasons``) carry a thermal or
  power bit (``vocabulary.THERMAL_THROTTLE_MASK`` / ``POWER_THROTTLE_MASK``);
* a Jetson (tegrastats or sysfs: no reasons reported): the GPU is busy (GR3D load at least
  ``throttle_busy_percent``), its clock is capped at least ``throttle_clock_loss`` below its
  maximum (``gpu_state.sm_clock_max_mhz`` where the sysfs sampler reported it, otherwise the
  highest GR3D frequency seen on that device, remembered in the progress state), and it is hot
  (``jetson_hot_c`` or above): a frequency cap while hot is thermal throttling.

Throttled samples in a row (gaps under ``throttle_clear_s`` do not break the run) open the
incident once the run is ``throttle_min_s`` long; ``throttle_clear_s`` without a throttled sample
resolves it. Facts: the cause, the hottest temperature, the lowest SM clock and the clock loss
against the maximum, and the duration. Samples are read incrementally (new rows since the mark).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import BigInteger, and_, case, cast, func, not_, or_, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    NS,
    Changes,
    Open,
    PassContext,
    Refresh,
    Resolve,
    _budgeted,
    _starts,
    fmt_duration,
    read_new_rows,
    read_new_sums,
)
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import gpu_samples, gpu_state, host_samples, metric_points
from fleetscope.proto.vocabulary import (
    DEVICE_KIND_JETSON,
    KIND_GPU_THROTTLING,
    POWER_THROTTLE_MASK,
    SEVERITY_WARNING,
    THERMAL_THROTTLE_MASK,
    throttle_reason_names,
)

NAME = KIND_GPU_THROTTLING


ONE_GROUP_NS = 10**18  # a sub-window that holds every sample: one sum per (device, GPU)
CPU_KEY = "cpu"


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    # A first pass reads what a run in progress needs to be seen as sustained.
    # (and a Jetson's clocks, to learn its maximum)
    lookback = max(2 * s.throttle_min_s + s.throttle_clear_s, 300.0)
    g = gpu_samples.c
    by_reason = and_(g.throttle_reasons.is_not(None),
                     cast(g.throttle_reasons, BigInteger).op("&")(THERMAL_THROTTLE_MASK | POWER_THROTTLE_MASK) != 0)
    maybe = or_(by_reason, and_(g.throttle_reasons.is_(None), g.util_gpu_percent >= s.throttle_busy_percent,
                                g.temp_c >= s.jetson_hot_c))
    # One GROUP BY over all devices: the highest clock not throttled by a reason (a Jetson's
    # maximum is learnt from it) and how many samples may be throttled.
    sums, marks = read_new_sums(
        ctx, NAME, gpu_samples, ["gpu_index"],
        lambda c, x: [func.max(case((not_(by_reason), c.sm_clock_mhz))), func.sum(case((maybe, 1), else_=0))],
        ONE_GROUP_NS, first_lookback_s=lookback,
    )
    # Only devices with a sample that may be throttled, or a run in progress, are read row by row.
    follow = set()
    for d in marks:
        _, state = ctx.mark(NAME, d)
        if any(r[-2] for r in sums.get(d, [])) or any(x.get("run") is not None for x in state.get("gpus", {}).values()):
            follow.add(d)
    rows, row_marks = read_new_rows(
        ctx, NAME, gpu_samples, ["gpu_index", "util_gpu_percent", "temp_c", "sm_clock_mhz", "throttle_reasons"],
        device_ids=sorted(follow), first_lookback_s=lookback, budget=False,
    )
    max_clocks = _state_max_clocks(ctx, sorted(follow))
    for d, until in marks.items():
        _, state = ctx.mark(NAME, d)
        gpus: dict[str, dict[str, Any]] = state.get("gpus", {})
        if d not in follow:
            for _dev, gpu, _start, clock, _n, _newest in sums.get(d, []):
                x = gpus.setdefault(str(gpu), {"run": None, "last": None, "max": None})
                if clock is not None and (x["max"] is None or clock > x["max"]):
                    x["max"] = float(clock)
            ch.set_progress(d, "", until, {**state, "gpus": gpus})
            continue
        for _dev, ts, gpu, util, temp, clock, reasons in rows.get(d, []):
            x = gpus.setdefault(str(gpu), {"run": None, "last": None, "max": None})
            known_max = max_clocks.get((d, gpu))
            if known_max:
                x["max"] = max(x["max"] or 0.0, known_max)
            throttled, cause = _throttled(s, x, util, temp, clock, reasons)
            if clock is not None and (x["max"] is None or clock > x["max"]) and not (reasons and int(reasons) & (THERMAL_THROTTLE_MASK | POWER_THROTTLE_MASK)):
                x["max"] = float(clock)
            _step(ctx, ch, DerivedKey(d, KIND_GPU_THROTTLING, int(gpu)), x, ts, throttled, cause, temp, clock,
                  reasons, lambda f, gpu=gpu, name=ctx.devices[d].name: _title(name, gpu, f), gpu=int(gpu))
        ch.set_progress(d, "", max(until, row_marks.get(d, until)), {**state, "gpus": gpus})
    _cpu_caps(ctx, ch, lookback)
    return ch


def _step(ctx: PassContext, ch: Changes, key: DerivedKey, x: dict, ts: int, throttled: bool, cause: str,
          temp: float | None, clock: float | None, reasons: float | None, title: Any, **extra: Any) -> None:
    """One sample of a run: extend it, open or refresh the incident once it is sustained, or end
    it (and resolve) after ``throttle_clear_s`` without a throttled sample."""
    s = ctx.settings
    if throttled:
        if x["run"] is None:
            x.update(run=ts, peak=temp, low=clock, mask=0, causes=[], opened=ctx.open.get(key) is not None)
        x["last"] = ts
        if temp is not None:
            x["peak"] = max(x.get("peak") or temp, temp)
        if clock is not None:
            x["low"] = min(x.get("low") or clock, clock)
        x["mask"] = int(x.get("mask") or 0) | int(reasons or 0)
        if cause not in x["causes"]:
            x["causes"].append(cause)
        if ts - x["run"] >= s.throttle_min_s * NS:
            facts = _facts(x, **extra)
            if not x.get("opened"):
                own = hint_math.hint(_own_hint(facts), **facts)
                hints = [own, *hint_math.hints_for(ctx.conn, key.device_id, ts, s, exclude=KIND_GPU_THROTTLING)]
                ch.ops.append(Open(key, x["run"], SEVERITY_WARNING, title(facts), facts, last_seen_ns=ts, hints=hints))
                x["opened"] = True
            else:
                cur = ctx.open.get(key)
                ch.ops.append(Refresh(cur.id if cur else None, ts, facts=facts, title=title(facts), key=key))
    elif x["run"] is not None and ts - (x["last"] or ts) >= s.throttle_clear_s * NS:
        if x.get("opened"):
            cur = ctx.open.get(key)
            ch.ops.append(Resolve(cur.id if cur else None, x["last"], facts=_facts(x, **extra), key=key))
        x["run"] = None
        x["opened"] = False


def _cpu_caps(ctx: PassContext, ch: Changes, lookback_s: float) -> None:
    """Jetson CPU frequency caps: tegrastats' per-core frequencies (``host_samples.cpu_cores``,
    ``[[load %, MHz], ...]``). The CPU is throttled when it is busy (mean core load at least
    ``throttle_busy_percent``), its fastest core is at least ``throttle_clock_loss`` below the
    highest core frequency seen on the device, and it is hot: the CPU sensor (metric
    ``jetson.temp_c``, sensor CPU) or the GPU's temperature at that instant at ``jetson_hot_c`` or
    above. Same run rules as the GPU; the incident's key is (device, gpu_throttling, no GPU, "cpu")."""
    s = ctx.settings
    jetsons = [d for d, dev in ctx.devices.items() if dev.kind == DEVICE_KIND_JETSON]
    if not jetsons:
        return
    h, g, mp = host_samples.c, gpu_samples.c, metric_points.c
    cpu_temp = (
        select(func.max(mp.value))
        .where(mp.device_id == h.device_id, mp.name == "jetson.temp_c", mp.ts_ns == h.ts_ns,
               func.lower(mp.labels).like('%"sensor":"cpu%'))
        .scalar_subquery()
    )
    join = host_samples.outerjoin(gpu_samples, and_(g.device_id == h.device_id, g.ts_ns == h.ts_ns, g.gpu_index == 0))
    cols = [h.device_id, h.ts_ns, h.cpu_percent, h.cpu_cores, g.temp_c, cpu_temp]
    marked, chunks = _starts(ctx, NAME, jetsons, CPU_KEY, lookback_s)
    rows: dict[int, list] = {}
    marks: dict[int, int] = {}
    for part in _budgeted(ctx, marked, chunks):
        low = min(part.values())
        q = select(*cols).select_from(join).where(h.device_id.in_(list(part)), h.ts_ns > low, h.ts_ns <= ctx.now_ns,
                                                   h.cpu_cores.is_not(None))
        for row in ctx.conn.execute(q).all():
            if row[1] > part[row[0]]:
                rows.setdefault(row[0], []).append(row)
        for d in part:
            marks[d] = max([part[d], *(r[1] for r in rows.get(d, []))])
    for d, until in marks.items():
        _, state = ctx.mark(NAME, d, CPU_KEY)
        x = state.get("cpu") or {"run": None, "last": None, "max": None}
        for _dev, ts, load, cores_json, gpu_temp, sensor_temp in sorted(rows.get(d, []), key=lambda r: r[1]):
            try:
                cores = json.loads(cores_json)
            except ValueError:
                continue
            freqs = [float(c[1]) for c in cores if isinstance(c, list) and len(c) > 1 and c[1]]
            if not freqs:
                continue
            clock = max(freqs)
            temps = [t for t in (sensor_temp, gpu_temp) if t is not None]
            temp = max(temps) if temps else None
            top = x.get("max")
            throttled = bool(load is not None and load >= s.throttle_busy_percent and top
                             and clock <= (1.0 - s.throttle_clock_loss) * top
                             and temp is not None and temp >= s.jetson_hot_c)
            if top is None or clock > top:
                x["max"] = clock
            _step(ctx, ch, DerivedKey(d, KIND_GPU_THROTTLING, None, CPU_KEY), x, ts, throttled, "thermal", temp,
                  clock, None, lambda f, name=ctx.devices[d].name: _cpu_title(name, f), component="cpu")
        ch.set_progress(d, CPU_KEY, until, {"cpu": x})


def _throttled(s: Any, g: dict, util: float | None, temp: float | None, clock: float | None,
               reasons: float | None) -> tuple[bool, str]:
    if reasons is not None:
        mask = int(reasons)
        if mask & THERMAL_THROTTLE_MASK:
            return True, "thermal"
        if mask & POWER_THROTTLE_MASK:
            return True, "power"
        return False, ""
    top = g.get("max")
    if (util is not None and util >= s.throttle_busy_percent and clock is not None and top
            and clock <= (1.0 - s.throttle_clock_loss) * top and temp is not None and temp >= s.jetson_hot_c):
        return True, "thermal"
    return False, ""


def _state_max_clocks(ctx: PassContext, device_ids: list[int]) -> dict[tuple[int, int], float]:
    """``gpu_state.sm_clock_max_mhz`` per (device, GPU), for the devices with new samples."""
    if not device_ids:
        return {}
    st = gpu_state.c
    out: dict[tuple[int, int], float] = {}
    for i in range(0, len(device_ids), 900):
        q = (select(st.device_id, st.gpu_index, func.max(st.sm_clock_max_mhz))
             .where(st.device_id.in_(device_ids[i : i + 900]), st.sm_clock_max_mhz.is_not(None))
             .group_by(st.device_id, st.gpu_index))
        for d, gpu, mx in ctx.conn.execute(q):
            if mx:
                out[(d, gpu)] = float(mx)
    return out


def _facts(g: dict, *, gpu: int | None = None, component: str = "gpu") -> dict[str, Any]:
    top, low = g.get("max"), g.get("low")
    facts: dict[str, Any] = {
        "component": component,
        "gpu_index": gpu,
        "cause": ",".join(g.get("causes") or ["thermal"]),
        "started_ns": g["run"],
        "last_throttled_ns": g["last"],
        "duration_s": round((g["last"] - g["run"]) / NS, 3),
        "peak_temp_c": g.get("peak"),
        "sm_clock_mhz": low,
        "sm_clock_max_mhz": top,
    }
    if g.get("mask"):
        facts["reasons"] = ",".join(throttle_reason_names(int(g["mask"])))
    if top and low is not None:
        facts["clock_loss_percent"] = round(max(0.0, 1.0 - low / top) * 100, 1)
    if component == "cpu":
        facts["cpu_clock_mhz"] = facts.pop("sm_clock_mhz")
        facts["cpu_clock_max_mhz"] = facts.pop("sm_clock_max_mhz")
        del facts["gpu_index"]
    return facts


def _own_hint(f: dict[str, Any]) -> str:
    text = f"{f['cause'].split(',')[0]} throttling"
    if f.get("peak_temp_c") is not None:
        text = f"throttled at {f['peak_temp_c']:.0f} °C"
    if f.get("clock_loss_percent") is not None:
        which = "CPU" if f.get("component") == "cpu" else "SM"
        now, top = (f["cpu_clock_mhz"], f["cpu_clock_max_mhz"]) if which == "CPU" else (f["sm_clock_mhz"], f["sm_clock_max_mhz"])
        text += f" with {which} clock {f['clock_loss_percent']:.0f} % below max ({now:.0f} of {top:.0f} MHz)"
    return text


def _cpu_title(device: str, f: dict[str, Any]) -> str:
    text = f"CPU on {device} thermally throttled for {fmt_duration(f['duration_s'])}"
    if f.get("peak_temp_c") is not None:
        text += f" at up to {f['peak_temp_c']:.0f} °C"
    if f.get("clock_loss_percent") is not None:
        text += f", CPU clock {f['clock_loss_percent']:.0f} % below max"
    return text


def _title(device: str, gpu: int, f: dict[str, Any]) -> str:
    how = "thermally" if f["cause"].startswith("thermal") else "power"
    text = f"GPU {gpu} on {device} {how} throttled for {fmt_duration(f['duration_s'])}"
    if f.get("peak_temp_c") is not None:
        text += f" at up to {f['peak_temp_c']:.0f} °C"
    if f.get("clock_loss_percent") is not None:
        text += f", SM clock {f['clock_loss_percent']:.0f} % below max"
    return text
