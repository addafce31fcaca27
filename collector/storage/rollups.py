"""Rollup definitions: how minute and hour rows are made from raw samples and from finer rollups.

The rollup job (``fleetscope.collector.jobs.rollup``) writes rollups with these definitions, and
the query API (``fleetscope.collector.query``) aggregates the stretch not rolled up yet with the
same ones, so a chart that mixes rollups and raw rows computes every point the same way.

Raw samples sit in two places: the tail tables (rows, aggregated in SQL by ``raw_aggregates``) and
the chunks (columns, aggregated with numpy by ``chunk_reader.chunk_buckets``). ``raw_buckets``
aggregates both and combines the two parts of a bucket with ``add_partial``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Table,
    case,
    cast,
    func,
    literal,
    select,
)
from sqlalchemy.sql.elements import ColumnElement

from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollup_schema import (
    gpu_rollups,
    host_rollups,
    rollup_progress,
)
from fleetscope.collector.storage.schema import gpu_samples, host_samples
from fleetscope.proto.vocabulary import POWER_THROTTLE_MASK, THERMAL_THROTTLE_MASK

NS = 10**9

# NVML clock-event reasons that mean "slowed down" (idle and application clocks are not), as
# the vocabulary builds them from the named bits the agent reports.
THERMAL_MASK = THERMAL_THROTTLE_MASK  # hw_slowdown, sw_thermal_slowdown, hw_thermal_slowdown
POWER_MASK = POWER_THROTTLE_MASK  # sw_power_cap, hw_power_brake_slowdown


@dataclass(frozen=True)
class Agg:
    """How one rollup column is made from a raw column, and re-made from finer rollups.

    ``how``: ``avg`` (weighted by sample count when re-aggregated), ``max``, ``min``,
    ``delta`` (last minus first of a cumulative counter; deltas add up), ``count_if`` (samples
    whose bit mask ``raw & mask`` is non-zero; counts add up).
    """

    name: str
    how: str
    raw: str
    mask: int = 0


GPU_AGGS: tuple[Agg, ...] = (
    Agg("util_avg", "avg", "util_gpu_percent"),
    Agg("util_max", "max", "util_gpu_percent"),
    Agg("mem_util_avg", "avg", "util_memory_percent"),
    Agg("memory_used_avg", "avg", "memory_used_bytes"),
    Agg("memory_used_max", "max", "memory_used_bytes"),
    Agg("temp_avg", "avg", "temp_c"),
    Agg("temp_max", "max", "temp_c"),
    Agg("power_avg", "avg", "power_w"),
    Agg("power_max", "max", "power_w"),
    Agg("energy_delta_j", "delta", "energy_j"),
    Agg("sm_clock_avg", "avg", "sm_clock_mhz"),
    Agg("sm_clock_min", "min", "sm_clock_mhz"),
    Agg("memory_clock_avg", "avg", "memory_clock_mhz"),
    Agg("fan_avg", "avg", "fan_percent"),
    Agg("throttle_thermal_n", "count_if", "throttle_reasons", THERMAL_MASK),
    Agg("throttle_power_n", "count_if", "throttle_reasons", POWER_MASK),
)

HOST_AGGS: tuple[Agg, ...] = (
    Agg("cpu_avg", "avg", "cpu_percent"),
    Agg("cpu_max", "max", "cpu_percent"),
    Agg("load1_avg", "avg", "load1"),
    Agg("mem_used_avg", "avg", "mem_used_bytes"),
    Agg("mem_used_max", "max", "mem_used_bytes"),
    Agg("mem_total_max", "max", "mem_total_bytes"),
    Agg("swap_used_avg", "avg", "swap_used_bytes"),
    Agg("swap_used_max", "max", "swap_used_bytes"),
    Agg("swap_total_max", "max", "swap_total_bytes"),
    Agg("disk_read_delta", "delta", "disk_read_bytes"),
    Agg("disk_write_delta", "delta", "disk_write_bytes"),
    Agg("net_rx_delta", "delta", "net_rx_bytes"),
    Agg("net_tx_delta", "delta", "net_tx_bytes"),
)


@dataclass(frozen=True)
class Source:
    """One time-series source: its raw table, its rollup table and how to aggregate."""

    kind: str  # "gpu" or "host"
    raw: Table
    rollup: Table
    aggs: tuple[Agg, ...]
    per_gpu: bool


GPU = Source("gpu", gpu_samples, gpu_rollups, GPU_AGGS, True)
HOST = Source("host", host_samples, host_rollups, HOST_AGGS, False)
SOURCES = (GPU, HOST)


# Cached: the expressions are immutable, and building them anew cost a comparison ~10 ms a read.
@functools.lru_cache(maxsize=64)
def raw_aggregates(source: Source) -> tuple[ColumnElement, ...]:
    """SELECT expressions over the raw table, labelled with the rollup column names."""
    t = source.raw.c
    out: list[ColumnElement] = [
        func.count().label("n"),
        (func.max(t.ts_ns) - func.min(t.ts_ns)).label("span_ns"),
    ]
    for a in source.aggs:
        col = t[a.raw]
        expr: ColumnElement[Any]
        if a.how == "avg":
            expr = func.avg(col)
        elif a.how == "max":
            expr = func.max(col)
        elif a.how == "min":
            expr = func.min(col)
        elif a.how == "delta":
            expr = func.max(col) - func.min(col)
        elif a.how == "count_if":
            # The raw column is a float (the wire carries every reading as a double); the mask
            # needs an integer on PostgreSQL, and SQLite's CAST is the same spelling.
            expr = func.sum(case((cast(col, BigInteger).op("&")(a.mask) != 0, 1), else_=0))
        else:  # pragma: no cover - the tables above are the only definitions
            raise ValueError(a.how)
        out.append(expr.label(a.name))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def rollup_aggregates(source: Source) -> tuple[ColumnElement, ...]:
    """SELECT expressions that re-aggregate finer rollup rows into coarser buckets."""
    r = source.rollup.c
    out: list[ColumnElement] = [func.sum(r.n).label("n"), func.sum(r.span_ns).label("span_ns")]
    for a in source.aggs:
        col = r[a.name]
        expr: ColumnElement[Any]
        if a.how == "avg":
            # Weighted by sample count, and only over rows that had the value at all.
            weight = func.sum(case((col.is_not(None), r.n), else_=0))
            expr = func.sum(col * r.n) / func.nullif(weight, 0)
        elif a.how == "max":
            expr = func.max(col)
        elif a.how == "min":
            expr = func.min(col)
        else:  # delta and count_if add up
            expr = func.sum(col)
        out.append(expr.label(a.name))
    return tuple(out)


def merge_values(aggs: Sequence[Agg], n_a: int, a: dict, n_b: int, b: dict) -> dict:
    """Combine two partial aggregates of one bucket (a bucket split between two sources)."""
    out = {}
    for g in aggs:
        x, y = a.get(g.name), b.get(g.name)
        if x is None or y is None:
            out[g.name] = y if x is None else x
        elif g.how == "avg":
            out[g.name] = (x * n_a + y * n_b) / (n_a + n_b) if n_a + n_b else None
        elif g.how == "max":
            out[g.name] = max(x, y)
        elif g.how == "min":
            out[g.name] = min(x, y)
        else:
            out[g.name] = x + y
    return out


def add_partial(
    aggs: Sequence[Agg], acc: dict[tuple, list], key: tuple, n: int, span_ns: int, values: dict
) -> None:
    """Add one partial aggregate of a bucket (``n`` samples over ``span_ns``) to ``acc``
    (``{key: [n, span_ns, values]}``), combined with what is there by ``merge_values``."""
    old = acc.get(key)
    if old is None:
        acc[key] = [n, span_ns, dict(values)]
    else:
        old[2] = merge_values(aggs, old[0], old[2], n, values)
        old[0] += n
        old[1] += span_ns


def raw_buckets(
    conn: Any,
    source: Source,
    device_ids: Sequence[int],
    lo: int,
    hi: int,
    step_s: int | None,
    per_gpu: bool,
    acc: dict[tuple, list] | None = None,
) -> dict[tuple, list]:
    """The devices' raw samples in [lo, hi) aggregated wherever they sit, into ``acc``:
    ``{(device_id, gpu_index or None, bucket_ns): [n, span_ns, {aggregate: value}]}`` per device
    (and GPU when ``per_gpu``) and bucket of ``step_s`` (one bucket 0 for the window when None).

    Tail rows are aggregated in SQL (``raw_aggregates``), chunk rows with numpy
    (``chunk_reader.chunk_buckets``), tail first, and a bucket with rows in both is combined by
    ``add_partial``: the rollup job's minute rows and the readers' raw stretch are the same
    computation, whichever way the samples are stored."""
    # chunk_reader imports this module (``Source``): imported here, not at the top.
    from fleetscope.collector.storage.chunk_reader import chunk_buckets

    acc = {} if acc is None else acc
    if not device_ids or lo >= hi:
        return acc
    per_gpu = per_gpu and source.per_gpu
    t = source.raw.c
    keys: list[ColumnElement] = [t.device_id, *([t.gpu_index] if per_gpu else [])]
    # A whole-window read selects a constant bucket but must not GROUP BY it (PostgreSQL refuses
    # constants there).
    bucket = bucket_of(t.ts_ns, step_s * NS) if step_s else literal(0, BigInteger)
    group = [*keys, bucket] if step_s else keys
    q = (
        select(*keys, bucket.label("b"), *raw_aggregates(source))
        .select_from(source.raw)
        .where(in_ids(t.device_id, device_ids), t.ts_ns >= lo, t.ts_ns < hi)
        .group_by(*group)
    )
    names = [a.name for a in source.aggs]
    for row in conn.execute(q):
        m = row._mapping
        key = (m["device_id"], m["gpu_index"] if per_gpu else None, m["b"])
        add_partial(source.aggs, acc, key, int(m["n"] or 0), int(m["span_ns"] or 0), {n: m[n] for n in names})
    for key, n, span, vals in chunk_buckets(conn, source, device_ids, lo, hi, step_s, per_gpu):
        add_partial(source.aggs, acc, key, n, span, vals)
    return acc


def bucket_of(column: ColumnElement, step_ns: int) -> ColumnElement:
    return column - (column % literal(step_ns, BigInteger))


def read_progress(conn: Connection, device_ids: Sequence[int] | None = None) -> dict[tuple[int, int], int]:
    """``{(device_id, step_s): rolled_until_ns}``."""
    q = select(rollup_progress.c.device_id, rollup_progress.c.step_s, rollup_progress.c.rolled_until_ns)
    if device_ids is not None:
        q = q.where(in_ids(rollup_progress.c.device_id, device_ids))
    return {(d, s): u for d, s, u in conn.execute(q)}
