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

from typing import Any

from sqlalchemy import func, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    NS,
    Changes,
    Open,
    PassContext,
    Refresh,
    Resolve,
    fmt_duration,
    read_new_rows,
)
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import gpu_samples, gpu_state
from fleetscope.proto.vocabulary import (
    KIND_GPU_THROTTLING,
    POWER_THROTTLE_MASK,
    SEVERITY_WARNING,
    THERMAL_THROTTLE_MASK,
    throttle_reason_names,
)

NAME = "gpu_throttling"


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    rows, marks = read_new_rows(
        ctx, NAME, gpu_samples, ["gpu_index", "util_gpu_percent", "temp_c", "sm_clock_mhz", "throttle_reasons"],
        first_lookback_s=max(2 * s.throttle_min_s, 300.0),  # and a Jetson's clocks to learn its maximum
    )
    max_clocks = _state_max_clocks(ctx, list(rows))
    for d, device_rows in rows.items():
        _, state = ctx.mark(NAME, d)
        gpus: dict[str, dict[str, Any]] = state.get("gpus", {})
        for _dev, ts, gpu, util, temp, clock, reasons in device_rows:
            g = gpus.setdefault(str(gpu), {"run": None, "last": None, "max": None})
            known_max = max_clocks.get((d, gpu))
            if known_max:
                g["max"] = max(g["max"] or 0.0, known_max)
            throttled, cause = _throttled(s, g, util, temp, clock, reasons)
            if clock is not None and (g["max"] is None or clock > g["max"]) and not (reasons and int(reasons) & (THERMAL_THROTTLE_MASK | POWER_THROTTLE_MASK)):
                g["max"] = float(clock)
            key = DerivedKey(d, KIND_GPU_THROTTLING, int(gpu))
            if throttled:
                if g["run"] is None:
                    g.update(run=ts, peak=temp, low=clock, mask=0, causes=[], opened=ctx.open.get(key) is not None)
                g["last"] = ts
                if temp is not None:
                    g["peak"] = max(g.get("peak") or temp, temp)
                if clock is not None:
                    g["low"] = min(g.get("low") or clock, clock)
                g["mask"] = int(g.get("mask") or 0) | int(reasons or 0)
                if cause not in g["causes"]:
                    g["causes"].append(cause)
                if ts - g["run"] >= s.throttle_min_s * NS:
                    facts = _facts(g, gpu)
                    title = _title(ctx.devices[d].name, gpu, facts)
                    if not g.get("opened"):
                        own = hint_math.hint(_own_hint(facts), **facts)
                        hints = [own, *hint_math.hints_for(ctx.conn, d, ts, s, exclude=KIND_GPU_THROTTLING)]
                        ch.ops.append(Open(key, g["run"], SEVERITY_WARNING, title, facts, last_seen_ns=ts, hints=hints))
                        g["opened"] = True
                    else:
                        cur = ctx.open.get(key)
                        ch.ops.append(Refresh(cur.id if cur else None, ts, facts=facts, title=title, key=key))
            elif g["run"] is not None and ts - (g["last"] or ts) >= s.throttle_clear_s * NS:
                if g.get("opened"):
                    facts = _facts(g, gpu)
                    cur = ctx.open.get(key)
                    ch.ops.append(Resolve(cur.id if cur else None, g["last"], facts=facts, key=key))
                g["run"] = None
                g["opened"] = False
        ch.set_progress(d, "", marks[d], {"gpus": gpus})
    return ch


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


def _facts(g: dict, gpu: int) -> dict[str, Any]:
    top, low = g.get("max"), g.get("low")
    facts: dict[str, Any] = {
        "gpu_index": int(gpu),
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
    return facts


def _own_hint(f: dict[str, Any]) -> str:
    text = f"{f['cause'].split(',')[0]} throttling"
    if f.get("peak_temp_c") is not None:
        text = f"throttled at {f['peak_temp_c']:.0f} °C"
    if f.get("clock_loss_percent") is not None:
        text += f" with SM clock {f['clock_loss_percent']:.0f} % below max ({f['sm_clock_mhz']:.0f} of {f['sm_clock_max_mhz']:.0f} MHz)"
    return text


def _title(device: str, gpu: int, f: dict[str, Any]) -> str:
    how = "thermally" if f["cause"].startswith("thermal") else "power"
    text = f"GPU {gpu} on {device} {how} throttled for {fmt_duration(f['duration_s'])}"
    if f.get("peak_temp_c") is not None:
        text += f" at up to {f['peak_temp_c']:.0f} °C"
    if f.get("clock_loss_percent") is not None:
        text += f", SM clock {f['clock_loss_percent']:.0f} % below max"
    return text
