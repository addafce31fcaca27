"""Agent offline: no data from a device for longer than its own interval allows.

The threshold is the one every part uses (``query.devices.OfflineRule``, from the settings'
``offline_after_s``, ``offline_intervals`` and ``offline_min_s``): ``offline_intervals`` times
the batch interval the device's agent said when it registered (1 s for an agent too old to
say), at least ``offline_min_s``, or ``offline_after_s`` outright. ``devices.last_seen_ns``
(collector time of the last batch) says when data last arrived: the check costs one read of the
devices table per pass.

A device whose agent said it stopped cleanly (its last batch was ``final``: a drone landing, a
service stopped) is not offline and gets no incident: it is "stopped" (an alert rule on absence
still sees it, if one asks).

The incident starts when data stopped (the last arrival) and resolves when data arrives again,
with the gap's length (last arrival before it to first batch after it, from ``ingested_batches``)
and what the agent's spool replayed: samples (tail rows and rows in chunks) and log rows stored
with timestamps inside the gap (sampled while it could not send) and the batches received since
it came back.
"""

from __future__ import annotations

from sqlalchemy import Table, and_, func, not_, select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    NS,
    Changes,
    DeviceInfo,
    Open,
    PassContext,
    Refresh,
    Resolve,
    fmt_duration,
)
from fleetscope.collector.query.devices import DEFAULT_BATCH_INTERVAL_S, said_stopped
from fleetscope.collector.storage.chunk_codec import decode_chunk
from fleetscope.collector.storage.chunk_reader import MAX_CHUNK_SPAN_NS
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import (
    gpu_chunks,
    gpu_samples,
    host_chunks,
    host_samples,
    ingested_batches,
    log_events,
)
from fleetscope.proto.vocabulary import KIND_AGENT_OFFLINE, SEVERITY_ERROR


def detect(ctx: PassContext) -> Changes:
    ch = Changes(KIND_AGENT_OFFLINE)
    rule = ctx.settings.offline_rule()
    for d, dev in ctx.devices.items():
        key = DerivedKey(d, KIND_AGENT_OFFLINE)
        cur = ctx.open.get(key)
        silent_ns = ctx.now_ns - dev.last_seen_ns
        if cur is not None:
            gap_start = int(cur.facts.get("last_seen_ns", cur.ts_ns))
            if dev.last_seen_ns > gap_start:
                facts = _resolution(ctx, dev, gap_start, dict(cur.facts))
                title = (
                    f"{dev.name} was silent for {fmt_duration(facts['gap_s'])}; back, "
                    f"{facts['replayed_rows']} rows replayed from its spool"
                )
                ch.ops.append(Resolve(cur.id, facts["gap_end_ns"], facts=facts, title=title))
            else:
                facts = dict(cur.facts, silent_s=round(silent_ns / NS, 1))
                ch.ops.append(
                    Refresh(
                        cur.id,
                        ctx.now_ns,
                        facts=facts,
                        title=_title(dev, silent_ns, facts.get("threshold_s", 0)),
                    )
                )
            continue
        if said_stopped(dev.counters):
            continue
        threshold_s = rule.threshold_s(dev.batch_interval_s)
        if silent_ns <= threshold_s * NS:
            continue
        interval_s = dev.batch_interval_s or DEFAULT_BATCH_INTERVAL_S
        facts = {
            "last_seen_ns": dev.last_seen_ns,
            "threshold_s": threshold_s,
            "interval_s": round(interval_s, 3),
            "silent_s": round(silent_ns / NS, 1),
            "spool_batches": dev.counters.get("spool_batches"),
        }
        hints = hint_math.hints_for(ctx.conn, d, dev.last_seen_ns, ctx.settings, exclude=KIND_AGENT_OFFLINE)
        ch.ops.append(
            Open(
                key,
                dev.last_seen_ns,
                SEVERITY_ERROR,
                _title(dev, silent_ns, threshold_s),
                facts,
                last_seen_ns=ctx.now_ns,
                hints=hints,
            )
        )
    return ch


def _title(dev: DeviceInfo, silent_ns: int, threshold_s: float) -> str:
    return f"{dev.name} silent for {fmt_duration(silent_ns / NS)} (offline after {threshold_s:g} s)"


def _resolution(ctx: PassContext, dev: DeviceInfo, gap_start: int, facts: dict) -> dict:
    b = ingested_batches.c
    first_back = ctx.conn.execute(
        select(func.min(b.received_ns)).where(b.agent_id == dev.agent_id, b.received_ns > gap_start)
    ).scalar()
    gap_end = int(first_back) if first_back is not None else dev.last_seen_ns
    batches = (
        ctx.conn.execute(
            select(func.count())
            .select_from(ingested_batches)
            .where(b.agent_id == dev.agent_id, b.received_ns >= gap_end)
        ).scalar()
        or 0
    )
    rows = 0
    # (metric points are left out: their index leads with the name, so a range per device would
    # walk all of its metrics)
    for t in (host_samples, gpu_samples, log_events):
        rows += (
            ctx.conn.execute(
                select(func.count())
                .select_from(t)
                .where(t.c.device_id == dev.id, t.c.ts_ns > gap_start, t.c.ts_ns < gap_end)
            ).scalar()
            or 0
        )
    for t in (host_chunks, gpu_chunks):
        rows += _chunked_rows(ctx, t, dev.id, gap_start, gap_end)
    facts.update(
        {
            "gap_start_ns": gap_start,
            "gap_end_ns": gap_end,
            "gap_s": round((gap_end - gap_start) / NS, 3),
            "replayed_rows": int(rows),
            "batches_since_back": int(batches),
        }
    )
    facts.pop("silent_s", None)
    return facts


def _chunked_rows(ctx: PassContext, table: Table, device_id: int, gap_start: int, gap_end: int) -> int:
    """Samples held in the device's chunks with gap_start < ts_ns < gap_end: the ``rows`` of the
    chunks wholly inside, and the rows inside of the chunks that straddle an end (decoded)."""
    import numpy as np

    c = table.c
    near = [
        c.device_id == device_id,
        c.start_ns < gap_end,
        c.end_ns > gap_start,
        c.start_ns >= gap_start - MAX_CHUNK_SPAN_NS,
    ]  # bounds the (device, start) index's scan
    inside = and_(c.start_ns > gap_start, c.end_ns < gap_end)
    rows = ctx.conn.execute(select(func.coalesce(func.sum(c.rows), 0)).where(*near, inside)).scalar() or 0
    for (data,) in ctx.conn.execute(select(c.data).where(*near, not_(inside))):
        ts = decode_chunk(bytes(data))[0]
        rows += int(np.count_nonzero((ts > gap_start) & (ts < gap_end)))
    return int(rows)
