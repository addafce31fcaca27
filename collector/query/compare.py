"""Comparisons: side-by-side figures for groups of devices, and the trtexec benchmark records.

A group is any set of devices; its latency histograms are merged (histograms merge exactly,
averages of percentiles would not) and its GPU readings aggregated over the same window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, device_ids, floor_to, max_of, read_beside, sum_of
from fleetscope.collector.query.devices import list_devices
from fleetscope.collector.query.incidents import search_incidents
from fleetscope.collector.query.latency import LatencySeries, LatencyStats, groups_latency, operations_of
from fleetscope.collector.query.planning import comparison_step
from fleetscope.collector.query.series import fetch_samples
from fleetscope.collector.query.types import DeviceSummary
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollups import GPU
from fleetscope.collector.storage.schema import Device
from fleetscope.proto.vocabulary import KIND_TRT_BENCHMARK


def comparison_start(since_ns: int, until_ns: int) -> int:
    """Where a comparison of [since, until) should start: the start of the chart bucket
    (``comparison_step``) that holds ``since``, so that the chart's first point is a whole
    bucket like the others and every edge of the window is served by the coarsest rollups (see
    ``compare_groups``). A month starts at the UTC midnight before it, a day at the whole hour."""
    start = since_ns
    for _ in range(3):  # a longer window may take a coarser step; steps nest, so this settles
        step = comparison_step(until_ns - start) * NS
        if start % step == 0 and floor_to(since_ns, step) == start:
            break
        start = floor_to(since_ns, step)
    return start


# The GPU aggregates a comparison shows: each one left out is a SUM(...)/MAX(...) less per row read.
_GPU_FIGURES = ("util_avg", "memory_used_avg", "power_avg", "temp_avg", "temp_max", "energy_delta_j")


@dataclass(frozen=True)
class GroupComparison:
    group: str
    devices: list[str]
    gpu_count: int
    latency: LatencyStats | None
    util_avg: float | None
    memory_used_per_gpu_bytes: float | None
    memory_total_per_gpu_bytes: float | None
    power_per_device_w: float | None  # mean over devices of (sum over its GPUs of mean power)
    power_per_gpu_w: float | None
    temp_avg_c: float | None
    temp_max_c: float | None
    energy_j: float | None  # GPU energy counters over the window, all devices
    energy_per_inference_j: float | None  # total GPU power / total throughput
    qps_per_watt: float | None
    qps_per_gpu: float | None
    # The operation's percentiles in ``comparison_step`` buckets over the same window (None
    # without an operation, or when it was never called).
    latency_series: LatencySeries | None = None


@dataclass(frozen=True)
class BenchmarkRecord:
    id: int
    device: str
    ts_ns: int
    title: str
    throughput_qps: float | None
    latency_mean_ms: float | None
    latency_p99_ms: float | None
    gpu_compute_mean_ms: float | None
    precision: str | None
    batch_size: int | None
    device_name: str | None
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """``compare_with_operations``: the groups compared with the operation chosen, and the
    operations their devices timed (most-counted first), what a picker offers."""

    operations: list[str]
    operation: str | None
    groups: list[GroupComparison]


def compare_with_operations(
    *,
    session: Session,
    groups: Mapping[str, Sequence[str]],
    since_ns: int,
    until_ns: int,
    wanted: str | None,
) -> Comparison:
    """``compare_groups`` with the operation ``wanted`` when the groups' devices timed it in the
    window, else the one they timed most (none when they timed none): the Compare page's one
    call. The operations and the chosen one's latency are read beside the GPU aggregates, not
    before them (a page that asked for the list first waited for both in turn)."""

    def choose(operations: list[str]) -> str | None:
        return wanted if wanted in operations else (operations[0] if operations else None)

    return _compare(session, groups, since_ns, until_ns, choose)


def compare_groups(
    *,
    session: Session,
    groups: Mapping[str, Sequence[str]],
    since_ns: int,
    until_ns: int,
    operation: str | None,
) -> list[GroupComparison]:
    """Side-by-side figures per group of devices over exactly [since, until), and the
    operation's percentiles over the same window in ``comparison_step`` buckets (the Compare
    page's chart: its buckets add up to the figures).

    Callers that show a comparison start it on a whole chart bucket (``comparison_start``):
    the part of the window before the first whole bucket of each tier is read from the next
    finer one, down to raw samples, which past the compaction delay means decoding an hour's
    chunk per GPU for a few seconds of data (most of a 24 h comparison's time on 200 devices
    when it started at an arbitrary second), and a month that starts mid-day reads up to 23
    hour rows and 59 minute rows per GPU for its first day.

    Every group is served by the same reads (GPU aggregates, then latency histograms, of all
    the groups' devices at once), split by device afterwards: a read per group and per figure
    cost a database round trip per tier each, most of the time on PostgreSQL.
    """
    return _compare(session, groups, since_ns, until_ns, None, operation).groups


_Latency = dict[str, tuple[LatencyStats | None, LatencySeries | None]]


def _compare(
    session: Session,
    groups: Mapping[str, Sequence[str]],
    since_ns: int,
    until_ns: int,
    choose: Callable[[list[str]], str | None] | None,
    operation: str | None = None,
) -> Comparison:
    """The comparison with ``operation``, or, given ``choose``, with the operation it picks
    from those the groups' devices timed."""
    reach = {group: device_ids(session, names) for group, names in groups.items()}  # {name or agent id: id}
    ids_by_group = {group: set(found.values()) for group, found in reach.items()}
    every_id = sorted({i for ids in ids_by_group.values() for i in ids})
    installs = _installs(session, every_id)

    def read_latency(s: Session, operation: str) -> _Latency:
        return groups_latency(
            session=s,
            groups=ids_by_group,
            streams={i: name for i, (name, _first, _i) in installs.items()},
            operation=operation,
            since_ns=since_ns,
            until_ns=until_ns,
            step_s=comparison_step(until_ns - since_ns),
        )

    def choose_and_read(s: Session) -> tuple[list[str], str | None, _Latency]:
        operations = operations_of(s, every_id, since_ns, until_ns) if choose is not None else []
        chosen = choose(operations) if choose is not None else operation
        return operations, chosen, (read_latency(s, chosen) if chosen else {})

    latency_read = read_beside(session, choose_and_read) if choose is not None or operation else None
    # The groups' installs only (2,000 devices: a tenth of a second on Citus), read while the
    # GPU aggregates are.
    devices_read = read_beside(session, lambda s: list_devices(session=s, now_ns=until_ns, ids=every_id))
    gpu_every, _ = fetch_samples(
        session, GPU, every_id, since_ns, until_ns, None, per_gpu=True, only=_GPU_FIGURES
    )
    operations, operation, latency = latency_read.result() if latency_read else ([], None, {})
    every_device = devices_read.result()
    out = []
    for group in groups:
        ids = ids_by_group[group]
        gpu_acc = {k: v for k, v in gpu_every.items() if k[0] in ids}
        lat, lat_series = latency.get(group, (None, None))
        n_all = sum(e[0] for e in gpu_acc.values())
        gpus = _gpus_of_newest_installs(installs, gpu_acc)

        wavg = _weighted(gpu_acc)
        power_by_device = _power_per_name(installs, gpu_acc)
        total_power = sum(power_by_device.values()) if power_by_device else None
        energy = sum_of(v.get("energy_delta_j") for _n, _s, v in gpu_acc.values())
        # One summary per name (its newest install: a reinstalled device's GPUs counted once).
        summaries: dict[str, DeviceSummary] = {}
        for d in every_device:
            if (d.name in reach[group] or d.agent_id in reach[group]) and (
                d.name not in summaries or d.first_seen_ns > summaries[d.name].first_seen_ns
            ):
                summaries[d.name] = d
        mem_totals = [
            float(g.get("memory_total_bytes") or 0)
            for s in summaries.values()
            for g in (s.inventory or {}).get("gpus", [])
        ]
        qps = lat.qps if lat else None
        out.append(
            GroupComparison(
                group=group,
                devices=sorted(summaries),
                gpu_count=gpus or sum(s.gpu_count for s in summaries.values()),
                latency=lat,
                util_avg=wavg("util_avg") if n_all else None,
                memory_used_per_gpu_bytes=wavg("memory_used_avg"),
                memory_total_per_gpu_bytes=(sum(mem_totals) / len(mem_totals)) if any(mem_totals) else None,
                power_per_device_w=(total_power / len(power_by_device)) if total_power is not None else None,
                power_per_gpu_w=wavg("power_avg"),
                temp_avg_c=wavg("temp_avg"),
                temp_max_c=max_of(v.get("temp_max") for _n, _s, v in gpu_acc.values()),
                energy_j=energy,
                energy_per_inference_j=(total_power / qps) if total_power and qps else None,
                qps_per_watt=(qps / total_power) if qps and total_power else None,
                qps_per_gpu=(qps / gpus) if qps and gpus else None,
                latency_series=lat_series,
            )
        )
    return Comparison(operations, operation, out)


def _installs(session: Session, ids: Sequence[int]) -> dict[int, tuple[str, int, int]]:
    """{device id: (name, first seen, id)} of these installs."""
    if not ids:
        return {}
    return {
        i: (name, first_seen, i)
        for i, name, first_seen in session.execute(
            select(Device.id, Device.name, Device.first_seen_ns).where(in_ids(Device.id, ids))
        )
    }


def _gpus_of_newest_installs(installs: Mapping[int, tuple[str, int, int]], acc: Mapping[tuple, list]) -> int:
    """GPUs counted per name, from its newest install with readings in the window: a device
    reinstalled (a new agent id) in the window is one device with its GPUs, not two."""
    newest: dict[str, tuple[str, int, int]] = {}
    for d in {d for d, _gi, _b in acc}:
        name, first_seen, i = installs[d]
        if name not in newest or (first_seen, i) > newest[name][1:]:
            newest[name] = (name, first_seen, i)
    keep = {i for _n, _f, i in newest.values()}
    return len({(d, gi) for d, gi, _b in acc if d in keep})


def _power_per_name(installs: Mapping[int, tuple[str, int, int]], acc: Mapping[tuple, list]) -> dict[str, float]:
    """{name: sum over its GPUs of mean power}, each GPU's mean weighted by samples across the
    name's installs (a reinstall in the window does not double a device's GPUs)."""
    per_gpu: dict[tuple[str, int], list[float]] = {}  # (name, gpu index) -> [sum of power*n, n]
    for (d, gi, _b), (n, _span, v) in acc.items():
        if v.get("power_avg") is not None:
            e = per_gpu.setdefault((installs[d][0], gi), [0.0, 0.0])
            e[0] += v["power_avg"] * (n or 1)
            e[1] += n or 1
    out: dict[str, float] = {}
    for (name, _gi), (num, den) in per_gpu.items():
        out[name] = out.get(name, 0.0) + num / den
    return out


def _weighted(acc: Mapping[tuple, list]) -> Callable[[str], float | None]:
    """A function giving the sample-weighted mean of one aggregate over ``acc``'s rows."""

    def mean(key: str) -> float | None:
        num = den = 0.0
        for n, _span, v in acc.values():
            if v.get(key) is not None:
                num += v[key] * n
                den += n
        return num / den if den else None

    return mean


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def benchmark_records(
    *, session: Session, since_ns: int, until_ns: int, devices: Sequence[str] | None = None, limit: int = 500
) -> list[BenchmarkRecord]:
    """trtexec performance summaries (incidents of kind trt_benchmark), newest first."""
    out = []
    for i in search_incidents(
        session=session,
        since_ns=since_ns,
        until_ns=until_ns,
        kinds=[KIND_TRT_BENCHMARK],
        devices=devices,
        limit=limit,
    ):
        f = i.facts
        if f.get("record", "performance_summary") != "performance_summary":
            continue  # a device-information block on its own carries no figures
        batch = f.get("batch_size")
        out.append(
            BenchmarkRecord(
                id=i.id,
                device=i.device,
                ts_ns=i.ts_ns,
                title=i.title,
                throughput_qps=_num(f.get("throughput_qps")),
                latency_mean_ms=_num(f.get("latency_mean_ms")),
                latency_p99_ms=_num(f.get("latency_p99_ms")),
                gpu_compute_mean_ms=_num(f.get("gpu_compute_mean_ms")),
                precision=str(f["precision"]) if f.get("precision") is not None else None,
                batch_size=int(batch)
                if isinstance(batch, (int, float)) and not isinstance(batch, bool)
                else None,
                device_name=str(f["device_name"]) if f.get("device_name") else None,
                facts=dict(f),
            )
        )
    return out
