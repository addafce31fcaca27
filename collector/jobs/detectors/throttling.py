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
against the maximum, and the duration. Samples are read incrementally (new samples since the mark,
from the tail and the chunks alike: one read per pass for all devices, summed per GPU in numpy,
and followed sample by sample only on the devices that may be throttled).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    MAX,
    NS,
    SUM,
    Changes,
    Open,
    PassContext,
    Refresh,
    Resolve,
    fmt_duration,
    new_sample_groups,
    sample_rows,
    sample_sums,
)
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import gpu_state, metric_points
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
SAMPLE_COLUMNS = ["util_gpu_percent", "temp_c", "sm_clock_mhz", "throttle_reasons"]


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    # A first pass reads what a run in progress needs to be seen as sustained.
    # (and a Jetson's clocks, to learn its maximum)
    lookback = max(2 * s.throttle_min_s + s.throttle_clear_s, 300.0)
    # One read of every device's new samples (tail and chunks), summed per (device, GPU): the
    # highest clock not throttled by a reason (a Jetson's maximum is learnt from it) and how many
    # samples may be throttled.
    groups = list(new_sample_groups(ctx, NAME, "gpu", SAMPLE_COLUMNS, first_lookback_s=lookback))
    sums, marks = sample_sums(groups, "gpu", ["gpu_index"], _clock_and_maybe(s), ONE_GROUP_NS)
    # Only devices with a sample that may be throttled, or a run in progress, are followed row by row.
    follow = set()
    for d in marks:
        _, state = ctx.mark(NAME, d)
        if any(r[-2] for r in sums.get(d, [])) or any(
            x.get("run") is not None for x in state.get("gpus", {}).values()
        ):
            follow.add(d)
    rows, row_marks = sample_rows(groups, ["gpu_index", *SAMPLE_COLUMNS], only=follow)
    del groups
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
            if (
                clock is not None
                and (x["max"] is None or clock > x["max"])
                and not (reasons and int(reasons) & (THERMAL_THROTTLE_MASK | POWER_THROTTLE_MASK))
            ):
                x["max"] = float(clock)
            _step(
                ctx,
                ch,
                DerivedKey(d, KIND_GPU_THROTTLING, int(gpu)),
                x,
                ts,
                throttled,
                cause,
                temp,
                clock,
                reasons,
                lambda f, gpu=gpu, name=ctx.devices[d].name: _title(name, gpu, f),
                gpu=int(gpu),
            )
        ch.set_progress(d, "", max(until, row_marks.get(d, until)), {**state, "gpus": gpus})
    _cpu_caps(ctx, ch, lookback)
    return ch


def _clock_and_maybe(s: Any) -> Any:
    """The sums ``detect`` takes per (device, GPU): the highest SM clock of the samples not
    throttled by a reason, and the number of samples that may be throttled (by a thermal or power
    reason, or with no reasons reported, busy and hot)."""
    import numpy as np

    def sums(v: dict[str, Any], x: Any) -> list[tuple[str, Any]]:
        reasons = v["throttle_reasons"]
        known = ~np.isnan(reasons)
        mask = np.where(known, reasons, 0).astype(np.int64)
        by_reason = known & ((mask & (THERMAL_THROTTLE_MASK | POWER_THROTTLE_MASK)) != 0)
        with np.errstate(invalid="ignore"):  # NaN (NULL) compares false, as SQL's NULL does
            hot_busy = (v["util_gpu_percent"] >= s.throttle_busy_percent) & (v["temp_c"] >= s.jetson_hot_c)
        maybe = by_reason | (~known & hot_busy)
        return [(MAX, np.where(by_reason, np.nan, v["sm_clock_mhz"])), (SUM, maybe.astype(np.float64))]

    return sums


def _step(
    ctx: PassContext,
    ch: Changes,
    key: DerivedKey,
    x: dict,
    ts: int,
    throttled: bool,
    cause: str,
    temp: float | None,
    clock: float | None,
    reasons: float | None,
    title: Any,
    **extra: Any,
) -> None:
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
                hints = [
                    own,
                    *hint_math.hints_for(ctx.conn, key.device_id, ts, s, exclude=KIND_GPU_THROTTLING),
                ]
                ch.ops.append(
                    Open(key, x["run"], SEVERITY_WARNING, title(facts), facts, last_seen_ns=ts, hints=hints)
                )
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
    rows: dict[int, list] = {}
    marks: dict[int, int] = {}
    for group in new_sample_groups(
        ctx,
        NAME,
        "host",
        ["cpu_percent"],
        texts=["cpu_cores"],
        device_ids=jetsons,
        present=["cpu_cores"],
        key=CPU_KEY,
        first_lookback_s=lookback_s,
    ):
        r = group.rows
        if len(r):
            ids = sorted(set(r.device_id.tolist()))
            lo, hi = int(r.ts_ns.min()), int(r.ts_ns.max()) + 1
            gpu_temps = _gpu0_temps(ctx, ids, lo, hi)
            cpu_temps = _cpu_sensor_temps(ctx, ids, lo, hi)
            loads = [None if v != v else v for v in r.values["cpu_percent"].tolist()]
            for d, ts, load, cores in zip(
                r.device_id.tolist(), r.ts_ns.tolist(), loads, r.texts["cpu_cores"]
            ):
                rows.setdefault(d, []).append(
                    (d, ts, load, cores, gpu_temps.get((d, ts)), cpu_temps.get((d, ts)))
                )
        for d, start in group.starts.items():
            marks[d] = max([start, *(row[1] for row in rows.get(d, []))])
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
            throttled = bool(
                load is not None
                and load >= s.throttle_busy_percent
                and top
                and clock <= (1.0 - s.throttle_clock_loss) * top
                and temp is not None
                and temp >= s.jetson_hot_c
            )
            if top is None or clock > top:
                x["max"] = clock
            _step(
                ctx,
                ch,
                DerivedKey(d, KIND_GPU_THROTTLING, None, CPU_KEY),
                x,
                ts,
                throttled,
                "thermal",
                temp,
                clock,
                None,
                lambda f, name=ctx.devices[d].name: _cpu_title(name, f),
                component="cpu",
            )
        ch.set_progress(d, CPU_KEY, until, {"cpu": x})


def _gpu0_temps(
    ctx: PassContext, device_ids: list[int], lo: int, hi: int
) -> dict[tuple[int, int], float | None]:
    """GPU 0's temperature per (device, sample time) in [lo, hi), tail and chunks: what a Jetson's
    CPU sample is compared with (its GPU sample of the same instant)."""
    g = read_samples(ctx.conn, "gpu", device_ids, lo, hi, columns=["temp_c"], gpu_index=0)
    temps = [None if v != v else v for v in g.values["temp_c"].tolist()]
    return dict(zip(zip(g.device_id.tolist(), g.ts_ns.tolist()), temps))


def _cpu_sensor_temps(
    ctx: PassContext, device_ids: list[int], lo: int, hi: int
) -> dict[tuple[int, int], float]:
    """The CPU sensor's temperature (metric ``jetson.temp_c``, sensor CPU) per (device, time) in
    [lo, hi): the hottest where several CPU sensors report."""
    mp = metric_points.c
    out: dict[tuple[int, int], float] = {}
    for i in range(0, len(device_ids), 900):
        q = (
            select(mp.device_id, mp.ts_ns, func.max(mp.value))
            .where(
                mp.device_id.in_(device_ids[i : i + 900]),
                mp.name == "jetson.temp_c",
                mp.ts_ns >= lo,
                mp.ts_ns < hi,
                func.lower(mp.labels).like('%"sensor":"cpu%'),
            )
            .group_by(mp.device_id, mp.ts_ns)
        )
        for d, ts, value in ctx.conn.execute(q):
            if value is not None:
                out[(d, ts)] = value
    return out


def _throttled(
    s: Any, g: dict, util: float | None, temp: float | None, clock: float | None, reasons: float | None
) -> tuple[bool, str]:
    if reasons is not None:
        mask = int(reasons)
        if mask & THERMAL_THROTTLE_MASK:
            return True, "thermal"
        if mask & POWER_THROTTLE_MASK:
            return True, "power"
        return False, ""
    top = g.get("max")
    if (
        util is not None
        and util >= s.throttle_busy_percent
        and clock is not None
        and top
        and clock <= (1.0 - s.throttle_clock_loss) * top
        and temp is not None
        and temp >= s.jetson_hot_c
    ):
        return True, "thermal"
    return False, ""


def _state_max_clocks(ctx: PassContext, device_ids: list[int]) -> dict[tuple[int, int], float]:
    """``gpu_state.sm_clock_max_mhz`` per (device, GPU), for the devices with new samples."""
    if not device_ids:
        return {}
    st = gpu_state.c
    out: dict[tuple[int, int], float] = {}
    for i in range(0, len(device_ids), 900):
        q = (
            select(st.device_id, st.gpu_index, func.max(st.sm_clock_max_mhz))
            .where(st.device_id.in_(device_ids[i : i + 900]), st.sm_clock_max_mhz.is_not(None))
            .group_by(st.device_id, st.gpu_index)
        )
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
        now, top = (
            (f["cpu_clock_mhz"], f["cpu_clock_max_mhz"])
            if which == "CPU"
            else (f["sm_clock_mhz"], f["sm_clock_max_mhz"])
        )
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
