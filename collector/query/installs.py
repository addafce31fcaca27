"""Reads over every install of a name, for the subjects whose one-device readers take one install.

A device reinstalled with a fresh state directory (a reflashed drone) registers again under its
name with a new agent id. ``_common.device_rows`` resolves a name to all of its installs; the
incidents, latency, metrics and comparison reads use it directly. This module does the same for
the readers that take one device: the log search, a device's series (the Device page's charts)
and its hardware readings, with the same arguments as the one-install readers, one history across
installs (an agent id still reads its one install).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, device_rows, floor_to
from fleetscope.collector.query.hardware import GpuHardware, JetsonView, gpu_hardware, jetson_view
from fleetscope.collector.query.latency import latency_series
from fleetscope.collector.query.planning import MAX_POINTS, POINTS_PER_CHART, TIER_ORDER, resolution_for
from fleetscope.collector.query.series import DeviceSeries, device_series, fetch_samples, series_table
from fleetscope.collector.query.types import LogLine
from fleetscope.collector.storage.rollups import GPU, HOST, Source, merge_values


def search_logs_all_installs(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    levels: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 1000,
) -> list[LogLine]:
    """``search_logs`` over every install ``device`` reaches: the newest ``limit`` events, oldest first."""
    from fleetscope.collector import query  # the package's search_logs: the one log reader

    search_logs = query.search_logs
    installs = device_rows(session, device)
    if len(installs) == 1:  # the usual case: the one reader, as asked
        return search_logs(session=session, device=device, since_ns=since_ns, until_ns=until_ns, levels=levels,
                           text=text, limit=limit)
    lines: list[LogLine] = []
    for d in installs:
        lines += search_logs(session=session, device=d.agent_id, since_ns=since_ns, until_ns=until_ns, levels=levels,
                             text=text, limit=limit)
    lines.sort(key=lambda ln: ln.ts_ns)
    return lines[-limit:] if limit else lines


def device_series_all_installs(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    step_s: int | None = None,
    latency: bool = True,
) -> DeviceSeries:
    """``device_series`` over every install ``device`` reaches: one chart across a reflash.

    The GPU and host buckets of the installs are merged bucket by bucket (installs of one name
    follow each other, so a bucket normally holds one of them), latency histograms are merged,
    and the GPU limits are the newest install's. An agent id still reads its one install."""
    installs = device_rows(session, device)
    if len(installs) == 1:  # the usual case: the one reader, as asked
        return device_series(session=session, device=device, since_ns=since_ns, until_ns=until_ns, step_s=step_s,
                             latency=latency)
    gpus = max(len((d.inventory or {}).get("gpus", [])) for d in installs) or 1
    step_s = step_s or resolution_for(until_ns - since_ns, max_points=min(MAX_POINTS, POINTS_PER_CHART // gpus))
    newest = device_series(session=session, device=installs[0].agent_id, since_ns=since_ns, until_ns=until_ns,
                           step_s=step_s, latency=False)
    ids = [d.id for d in installs]
    lo = floor_to(since_ns, step_s * NS)
    gpu_acc, used_g = fetch_samples(session, GPU, ids, lo, until_ns, step_s, per_gpu=True)
    host_acc, used_h = fetch_samples(session, HOST, ids, lo, until_ns, step_s, per_gpu=False)
    lat = latency_series(session, ids, lo, until_ns, step_s, by_labels=True) if latency else []
    return dataclasses.replace(
        newest,
        device=installs[0].name,
        sources=tuple(s for s in TIER_ORDER if s in used_g | used_h),
        gpu=series_table(GPU, _across_installs(GPU, gpu_acc), per_gpu=True),
        host=series_table(HOST, _across_installs(HOST, host_acc), per_gpu=False),
        latency=lat,
    )


def _across_installs(src: Source, acc: Mapping[tuple, list]) -> dict[tuple, list]:
    """``fetch_samples``' buckets keyed by (device id, GPU, bucket) folded to (0, GPU, bucket)."""
    out: dict[tuple, list] = {}
    for (_device, gpu, bucket), (n, span, values) in acc.items():
        key = (0, gpu, bucket)
        old = out.get(key)
        if old is None:
            out[key] = [n, span, dict(values)]
        else:
            old[2] = merge_values(src.aggs, old[0], old[2], n, values)
            old[0] += n
            old[1] += span
    return out


def _install_for(session: Session, device: str, until_ns: int) -> list[str]:
    """The agent ids to try for readings as of ``until_ns``: installs that began by then, newest first."""
    installs = device_rows(session, device)
    began = [d.agent_id for d in installs if d.first_seen_ns <= until_ns]
    return began or [installs[-1].agent_id]


def gpu_hardware_all_installs(*, session: Session, device: str, until_ns: int) -> list[GpuHardware]:
    """``gpu_hardware`` of the install of ``device`` that reported last by ``until_ns``: a reflashed
    device shows its new install's GPUs, and a range that ended before the reflash the old one's."""
    for agent_id in _install_for(session, device, until_ns):
        found = gpu_hardware(session=session, device=agent_id, until_ns=until_ns)
        if found:
            return found
    return []


def jetson_view_all_installs(*, session: Session, device: str, until_ns: int) -> JetsonView | None:
    """``jetson_view`` of the install of ``device`` that reported last by ``until_ns`` (as above)."""
    for agent_id in _install_for(session, device, until_ns):
        found = jetson_view(session=session, device=agent_id, until_ns=until_ns)
        if found is not None:
            return found
    return None
