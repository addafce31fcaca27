"""What a device's hardware reports besides the charted readings: the nvitop and jtop views.

* ``gpu_hardware``: per GPU at a moment, its compute processes with their GPU memory (what
  nvitop shows first), ECC counts, retired pages and remapped rows, the PCIe link and its
  throughput, fan and power against its limit. State (limits, ECC, processes) is stored only
  when it changes, so the newest state row at or before the moment is the state then; the
  sampled readings are each GPU's newest near the device's newest sample by then.
* ``jetson_view``: a Jetson's board at a moment, from its metric points: nvpmodel and
  jetson_clocks, EMC load and frequency, every engine (NVENC, NVDEC, NVJPG, VIC, DLA...), every
  power rail and thermal sensor, the fan, as of its newest reading by then. None when the
  device reported none.

Both read the device's newest install (a name reinstalled under a new agent id: the board as
it is now).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_row
from fleetscope.collector.storage.chunk_reader import MAX_CHUNK_SPAN_NS, read_gpu_chunk_rows
from fleetscope.collector.storage.schema import gpu_chunks, gpu_samples, gpu_state, metric_points

NS = 10**9
SAMPLE_LOOKBACK_NS = 60 * NS  # each GPU's newest sample within this of the device's newest
JETSON_LOOKBACK_NS = 30 * NS  # each reading's newest within this of the board's newest

__all__ = [
    "GpuHardware",
    "GpuProcess",
    "JetsonReading",
    "JetsonView",
    "gpu_hardware",
    "jetson_view",
]


@dataclass(frozen=True)
class GpuProcess:
    gpu_index: int
    pid: int
    name: str
    gpu_memory_bytes: int | None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    container_id: str | None = None


@dataclass(frozen=True)
class GpuHardware:
    """One GPU at a moment; None: not reported by this GPU (or not in the window)."""

    gpu_index: int
    state_ts_ns: int | None
    sample_ts_ns: int | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_w: float | None
    power_limit_w: float | None
    fan_percent: float | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_rx_bytes_per_s: float | None
    pcie_tx_bytes_per_s: float | None
    ecc_volatile_corrected: int | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_corrected: int | None
    ecc_aggregate_uncorrected: int | None
    retired_pages: int | None
    remapped_rows: int | None
    processes: tuple[GpuProcess, ...] | None  # None: no process list reported (a Jetson, an old driver)


@dataclass(frozen=True)
class JetsonReading:
    """One labelled reading: a rail (mW, with its average), a sensor (°C) or an engine (MHz)."""

    name: str
    value: float
    average: float | None = None


@dataclass(frozen=True)
class JetsonView:
    ts_ns: int
    nvpmodel_id: int | None
    nvpmodel_mode: str | None
    jetson_clocks: bool | None
    emc_load_percent: float | None
    emc_mhz: float | None
    fan_percent: float | None
    engines: tuple[JetsonReading, ...]  # MHz; 0 = off
    rails: tuple[JetsonReading, ...]  # mW (average mW beside)
    temps: tuple[JetsonReading, ...]  # °C


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _processes(text: str | None, gpu_index: int) -> tuple[GpuProcess, ...] | None:
    if not text:
        return None
    out = []
    for p in json.loads(text):
        out.append(GpuProcess(
            gpu_index=gpu_index, pid=int(p.get("pid", 0)), name=str(p.get("name", "")),
            gpu_memory_bytes=_int(p.get("gpu_memory_bytes")), cpu_percent=p.get("cpu_percent"),
            rss_bytes=_int(p.get("rss_bytes")), container_id=p.get("container_id"),
        ))
    return tuple(sorted(out, key=lambda p: -(p.gpu_memory_bytes or 0)))


SAMPLE_READINGS = ("memory_used_bytes", "power_w", "fan_percent", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")


def _newest_samples(session: Session, device_id: int, until_ns: int) -> dict[int, dict[str, Any]]:
    """Each GPU's newest sample readings near the device's newest sample at or before ``until_ns``,
    from the tail and from the chunks alike: a moment more than an hour back has been folded.
    An offline device shows how it was when it went quiet."""
    g, k = gpu_samples.c, gpu_chunks.c
    tail_last = session.scalar(
        select(func.max(g.ts_ns)).where(g.device_id == device_id, g.ts_ns <= until_ns)
    )
    # Chunks wholly before the moment give their last row's time from the index; a chunk that
    # straddles the moment must be decoded to find its last row before it.
    whole_last = session.scalar(
        select(func.max(k.end_ns)).where(k.device_id == device_id, k.end_ns <= until_ns)
    )
    known = [int(t) for t in (tail_last, whole_last) if t is not None]
    last = max(known) if known else None
    straddling = read_gpu_chunk_rows(session, [device_id], (last + 1) if last is not None else until_ns - MAX_CHUNK_SPAN_NS,
                                     until_ns + 1, columns=())
    if len(straddling):
        last = int(straddling.ts_ns.max())
    if last is None:
        return {}
    lo = last - SAMPLE_LOOKBACK_NS
    window = (g.device_id == device_id, g.ts_ns <= last, g.ts_ns > lo)
    newest_sample = (
        select(g.gpu_index, func.max(g.ts_ns).label("ts")).where(*window).group_by(g.gpu_index).subquery()
    )
    out: dict[int, dict[str, Any]] = {}
    for r in session.execute(
        select(g.ts_ns, g.gpu_index, *(g[c] for c in SAMPLE_READINGS)).join(
            newest_sample, (g.gpu_index == newest_sample.c.gpu_index) & (g.ts_ns == newest_sample.c.ts),
        ).where(*window)
    ):
        out[int(r.gpu_index)] = dict(r._mapping)
    chunked = read_gpu_chunk_rows(session, [device_id], lo + 1, last + 1, columns=SAMPLE_READINGS)
    for i in range(len(chunked)):  # time order: the newest row of each GPU wins
        gi = int(chunked.gpu_index[i])
        ts = int(chunked.ts_ns[i])
        have = out.get(gi)
        if have is None or ts > int(have["ts_ns"]):
            out[gi] = {"ts_ns": ts, "gpu_index": gi, **{c: chunked.value(c, i) for c in SAMPLE_READINGS}}
    return out


def gpu_hardware(*, session: Session, device: str, until_ns: int) -> list[GpuHardware]:
    """Every GPU of ``device`` as it was at ``until_ns`` (its newest state and sample by then), by index."""
    device_id = device_row(session, device).id
    # The newest state row of each GPU at or before the moment.
    newest_state = (
        select(gpu_state.c.gpu_index, func.max(gpu_state.c.ts_ns).label("ts"))
        .where(gpu_state.c.device_id == device_id, gpu_state.c.ts_ns <= until_ns)
        .group_by(gpu_state.c.gpu_index)
        .subquery()
    )
    states = {
        r.gpu_index: r
        for r in session.execute(
            select(gpu_state).join(
                newest_state,
                (gpu_state.c.gpu_index == newest_state.c.gpu_index) & (gpu_state.c.ts_ns == newest_state.c.ts),
            ).where(gpu_state.c.device_id == device_id)
        )
    }
    samples = _newest_samples(session, device_id, until_ns)
    out = []
    for gi in sorted(set(states) | set(samples)):
        st, sm = states.get(gi), samples.get(gi)

        def state(name: str, st: object = st) -> float | None:
            return None if st is None else getattr(st, name)

        def sample(name: str, sm: dict[str, Any] | None = sm) -> float | None:
            return None if sm is None else sm[name]

        out.append(GpuHardware(
            gpu_index=gi,
            state_ts_ns=None if st is None else st.ts_ns,
            sample_ts_ns=None if sm is None else int(sm["ts_ns"]),
            memory_used_bytes=sample("memory_used_bytes"),
            memory_total_bytes=state("memory_total_bytes"),
            power_w=sample("power_w"),
            power_limit_w=state("power_limit_w"),
            fan_percent=sample("fan_percent"),
            pcie_gen=_int(state("pcie_gen")),
            pcie_width=_int(state("pcie_width")),
            pcie_rx_bytes_per_s=sample("pcie_rx_bytes_per_s"),
            pcie_tx_bytes_per_s=sample("pcie_tx_bytes_per_s"),
            ecc_volatile_corrected=_int(state("ecc_volatile_corrected")),
            ecc_volatile_uncorrected=_int(state("ecc_volatile_uncorrected")),
            ecc_aggregate_corrected=_int(state("ecc_aggregate_corrected")),
            ecc_aggregate_uncorrected=_int(state("ecc_aggregate_uncorrected")),
            retired_pages=_int(state("retired_pages")),
            remapped_rows=_int(state("remapped_rows")),
            processes=None if st is None else _processes(st.processes, gi),
        ))
    return out


def jetson_view(*, session: Session, device: str, until_ns: int) -> JetsonView | None:
    """The newest Jetson board readings of ``device`` at or before ``until_ns`` (within two minutes)."""
    device_id = device_row(session, device).id
    last = session.scalar(
        select(func.max(metric_points.c.ts_ns)).where(
            metric_points.c.device_id == device_id,
            metric_points.c.ts_ns <= until_ns,
            metric_points.c.name.like("jetson.%"),
        )
    )
    if last is None:
        return None
    rows = session.execute(
        select(metric_points.c.ts_ns, metric_points.c.name, metric_points.c.value, metric_points.c.labels)
        .where(
            metric_points.c.device_id == device_id,
            metric_points.c.ts_ns <= last,
            metric_points.c.ts_ns > last - JETSON_LOOKBACK_NS,
            metric_points.c.name.like("jetson.%"),
        )
        .order_by(metric_points.c.ts_ns)
    ).all()
    if not rows:
        return None
    latest: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
    newest_ts = 0
    for r in rows:  # oldest first: the newest reading of each (name, labels) wins
        latest[(r.name, r.labels)] = (r.value, json.loads(r.labels) if r.labels else {})
        newest_ts = max(newest_ts, r.ts_ns)

    def one(name: str) -> tuple[float, dict[str, str]] | None:
        found = [v for (n, _l), v in latest.items() if n == name]
        return found[0] if found else None

    def labelled(name: str, label: str) -> dict[str, float]:
        return {lab.get(label, ""): v for (n, _l), (v, lab) in latest.items() if n == name}

    averages = labelled("jetson.power_avg_mw", "rail")
    rails = tuple(
        JetsonReading(rail, mw, averages.get(rail))
        for rail, mw in sorted(labelled("jetson.power_mw", "rail").items(), key=lambda kv: (kv[0] != "VDD_IN", kv[0]))
    )
    nvp = one("jetson.nvpmodel_id")
    clocks = one("jetson.jetson_clocks")
    emc_load, emc_mhz, fan = one("jetson.emc_load_percent"), one("jetson.emc_mhz"), one("jetson.fan_percent")
    return JetsonView(
        ts_ns=newest_ts,
        nvpmodel_id=None if nvp is None else int(nvp[0]),
        nvpmodel_mode=(nvp[1].get("mode") or None) if nvp is not None else None,
        jetson_clocks=None if clocks is None else clocks[0] >= 0.5,
        emc_load_percent=None if emc_load is None else emc_load[0],
        emc_mhz=None if emc_mhz is None else emc_mhz[0],
        fan_percent=None if fan is None else fan[0],
        engines=tuple(JetsonReading(k, v) for k, v in sorted(labelled("jetson.engine_mhz", "engine").items())),
        rails=rails,
        temps=tuple(JetsonReading(k, v) for k, v in sorted(labelled("jetson.temp_c", "sensor").items())),
    )
