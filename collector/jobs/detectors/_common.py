"""What every detector shares: the pass context (devices, progress marks, open incidents read
once per pass), the changes a detector hands back to be written in one transaction, the
incremental reader of raw rows, and the windowed sums that least squares and means are made of.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Float,
    Integer,
    Table,
    cast,
    column,
    func,
    literal_column,
    select,
    values,
)

from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.storage.chunk_reader import (
    HOST_TEXT_COLUMNS,
    MIXED_GPU_COLUMN,
    ChunkRows,
    read_samples,
    take_rows,
)
from fleetscope.collector.storage.incident_lifecycle import DerivedKey, OpenIncident
from fleetscope.collector.storage.schema import gpu_samples, host_samples

if TYPE_CHECKING:
    import numpy as np

NS = 10**9
MIB = 1 << 20
EMPTY_TTL_NS = 2 * NS


@dataclass(frozen=True)
class DeviceInfo:
    id: int
    name: str
    kind: str
    labels: dict[str, Any]
    last_seen_ns: int
    agent_id: str
    counters: dict[str, Any]
    batch_interval_s: float | None = None  # as its agent said at registration (None: an older agent)


@dataclass
class PassContext:
    """What one pass reads once and every detector consults. ``conn`` is a read connection."""

    conn: Connection
    now_ns: int
    settings: DetectorSettings
    devices: dict[int, DeviceInfo]
    progress: dict[tuple[str, int, str], tuple[int, dict]]  # (detector, device, key) -> (until_ns, state)
    open: dict[DerivedKey, OpenIncident]
    rolled: dict[int, int] = field(default_factory=dict)  # device -> minute rollups final below this
    names: NameCache | None = None
    # What a detector keeps between passes in this holder's memory only (rebuilt from the stored
    # data when it is gone: after a restart or a takeover); dropped with the progress marks.
    memo: dict[str, dict] = field(default_factory=dict)
    # time.monotonic() after which a pass reads no more first windows ("catch-up"): devices
    # left over are read from the next pass on, their marks unmoved, so nothing is skipped.
    catchup_until: float = float("inf")
    catchup_taken: bool = False
    catchup_left_out: bool = False  # a chunk of first windows was left for a later pass

    def take_catchup(self) -> bool:
        """May this pass read one more chunk of first windows? Yes while its budget lasts, and
        always for the first chunk of the pass (so catching up always moves on)."""
        if self.catchup_taken and time.monotonic() >= self.catchup_until:
            self.catchup_left_out = True
            return False
        self.catchup_taken = True
        return True

    def operations(self, device_id: int) -> set[str]:
        """The latency operations this device has timed (discovered now and then, see ``NameCache``)."""
        if self.names is None:
            return set()
        return self.names.operations(self.conn, device_id, self.now_ns, self.devices)

    def mark(self, detector: str, device_id: int, key: str = "") -> tuple[int | None, dict]:
        got = self.progress.get((detector, device_id, key))
        return (None, {}) if got is None else (got[0], dict(got[1] or {}))


@dataclass
class Open:
    key: DerivedKey
    started_ns: int
    severity: str
    title: str
    facts: dict[str, Any]
    hints: list[dict[str, Any]] = field(default_factory=list)
    last_seen_ns: int | None = None
    pid: int | None = None
    process_name: str = ""


@dataclass
class Refresh:
    """``incident_id`` None: the incident this pass opened under ``key``."""

    incident_id: int | None
    last_seen_ns: int
    facts: dict[str, Any] | None = None
    title: str | None = None
    severity: str | None = None
    hints: list[dict[str, Any]] | None = None
    key: DerivedKey | None = None


@dataclass
class Resolve:
    """``incident_id`` None: the incident this pass opened under ``key``."""

    incident_id: int | None
    ended_ns: int
    facts: dict[str, Any] | None = None
    title: str | None = None
    key: DerivedKey | None = None


@dataclass
class Hints:
    incident_id: int
    hints: list[dict[str, Any]]


@dataclass
class Changes:
    """What a detector's pass writes: incident changes and progress marks, committed together."""

    detector: str
    ops: list[Open | Refresh | Resolve | Hints] = field(default_factory=list)
    progress: dict[tuple[int, str], tuple[int, dict]] = field(
        default_factory=dict
    )  # (device, key) -> (until, state)
    resolve_quiet_s: float | None = None  # the lifecycle step: resolve event incidents quiet this long

    def set_progress(self, device_id: int, key: str, until_ns: int, state: dict | None = None) -> None:
        self.progress[(device_id, key)] = (int(until_ns), state or {})


class NameCache:
    """Which operations each device times, for reads by name.

    Raw histograms are indexed by (device, name, start): a read without the name would walk every
    row the device ever sent. Names are found with one index seek per distinct name (the next name
    after the last one found) and kept for ``ttl_s``; an operation that appears later is read from
    its first window after the refresh (a device with none yet is looked at every two seconds)."""

    def __init__(self, ttl_s: float = 60.0) -> None:
        self.ttl_ns = int(ttl_s * NS)
        self._names: dict[int, tuple[int, set[str]]] = {}

    def operations(
        self, conn: Connection, device_id: int, now_ns: int, devices: Iterable[int] = ()
    ) -> set[str]:
        """The device's operations; ``devices``: others to refresh in the same statement when due."""
        if self._due(device_id, now_ns):
            self.refresh(
                conn, [device_id, *(d for d in devices if d != device_id and self._due(d, now_ns))], now_ns
            )
        return self._names[device_id][1]

    def _due(self, device_id: int, now_ns: int) -> bool:
        got = self._names.get(device_id)
        # A device that timed nothing yet is looked at again sooner: its program may just be starting.
        return got is None or now_ns - got[0] >= (self.ttl_ns if got[1] else min(self.ttl_ns, EMPTY_TTL_NS))

    def refresh(self, conn: Connection, device_ids: Sequence[int], now_ns: int) -> None:
        """Every distinct name of each device, in one recursive statement (SQLite and PostgreSQL):
        per device, the smallest name, then the next one after it, each an index seek on
        (device_id, name, start_ns). Citus plans a recursive statement only when it is about one
        device (then it runs on that device's worker): there it is one statement per device."""
        from sqlalchemy import bindparam, text

        from fleetscope.collector.storage.citus import is_citus

        found: dict[int, set[str]] = {d: set() for d in device_ids}
        if is_citus(conn):
            one = text(
                "WITH RECURSIVE n(name) AS ("
                " SELECT min(h.name) FROM latency_histograms h WHERE h.device_id = :d"
                " UNION ALL"
                " SELECT (SELECT min(h.name) FROM latency_histograms h WHERE h.device_id = :d AND h.name > n.name)"
                " FROM n WHERE n.name IS NOT NULL"
                ") SELECT name FROM n WHERE name IS NOT NULL"
            )
            for d in device_ids:
                found[d].update(conn.execute(one, {"d": d}).scalars())
            for d, names in found.items():
                self._names[d] = (now_ns, names)
            return
        stmt = text(
            "WITH RECURSIVE n(device_id, name) AS ("
            " SELECT d.id, (SELECT min(h.name) FROM latency_histograms h WHERE h.device_id = d.id)"
            " FROM devices d WHERE d.id IN :ids"
            " UNION ALL"
            " SELECT n.device_id, (SELECT min(h.name) FROM latency_histograms h"
            " WHERE h.device_id = n.device_id AND h.name > n.name)"
            " FROM n WHERE n.name IS NOT NULL"
            ") SELECT device_id, name FROM n WHERE name IS NOT NULL"
        ).bindparams(bindparam("ids", expanding=True))
        ids = list(device_ids)
        for i in range(0, len(ids), 900):
            for d, name in conn.execute(stmt, {"ids": ids[i : i + 900]}):
                found[d].add(name)
        for d, names in found.items():
            self._names[d] = (now_ns, names)


def loads(value: Any) -> Any:
    """A JSON column or a JSON text column: SQLite hands back text, psycopg parsed objects."""
    if value is None:
        return None
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# ---------------------------------------------------------------------------------- reading


CATCHUP_CHUNK = 100  # devices read together while catching up


def _starts(
    ctx: PassContext, detector: str, ids: Iterable[int], key: str, first_lookback_s: float | None
) -> tuple[dict[int, int], list[dict[int, int]]]:
    """Where each device's read starts: (devices with a mark, chunks of devices reading their
    first window). The first window is ``first_lookback_s`` (what the detector's window needs),
    a pass after a long pause reads at most ``settings.lookback_s`` back. Devices not heard from
    since their start are left out."""
    now = ctx.now_ns
    floor = now - int(ctx.settings.lookback_s * NS)
    first = now - int(min(ctx.settings.lookback_s, first_lookback_s or ctx.settings.lookback_s) * NS)
    marked: dict[int, int] = {}
    fresh: dict[int, int] = {}
    for d in ids:
        got = ctx.progress.get((detector, d, key))
        start = first if got is None else max(got[0], floor)
        # last_seen_ns is when data last arrived (collector time), ts_ns the sample's own time
        # on the same base: nothing newer than the mark can have arrived before it (a minute of
        # slack for a stream's skew correction).
        if ctx.devices[d].last_seen_ns < start - 60 * NS:
            continue
        (fresh if got is None else marked)[d] = start
    order = sorted(fresh)
    chunks = [
        {d: fresh[d] for d in order[i : i + CATCHUP_CHUNK]} for i in range(0, len(order), CATCHUP_CHUNK)
    ]
    return marked, chunks


def _budgeted(
    ctx: PassContext, marked: dict[int, int], chunks: list[dict[int, int]], budget: bool = True
) -> Iterator[dict[int, int]]:
    """The devices to read, in groups: those with marks, then first windows chunk by chunk while
    the pass's catch-up budget lasts (``PassContext.take_catchup``)."""
    ids = list(marked)
    for i in range(0, len(ids), 900):
        yield {d: marked[d] for d in ids[i : i + 900]}
    for chunk in chunks:
        if budget and not ctx.take_catchup():
            return
        yield chunk


def _not_samples(table: Table) -> None:
    if table.name in (gpu_samples.name, host_samples.name):
        raise ValueError(
            f"{table.name}: raw samples sit in chunks too; read them with read_new_samples "
            "or read_new_sample_sums"
        )


def read_new_rows(
    ctx: PassContext,
    detector: str,
    table: Table,
    columns: Sequence[str],
    *,
    device_ids: Iterable[int] | None = None,
    where: Sequence[Any] = (),
    key: str = "",
    first_lookback_s: float | None = None,
    budget: bool = True,
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """Rows of ``table`` (``device_id``, ``ts_ns`` first, then ``columns``) that arrived since this
    detector's mark for each device: timestamps after the device's mark, up to now. (Not for raw
    samples, which sit in chunks too: ``read_new_samples``.)

    Devices are read together, one query per group of devices whose starts lie within a minute of
    each other (usually one group), with ``device_id IN (...)`` and a range on ``ts_ns``, which the
    (device_id, ts_ns) indexes serve. First windows are read within the pass's catch-up budget
    (``_budgeted``): a device left over has no rows and no mark this pass. Returns the rows per
    device in time order, and each device's new mark: the newest timestamp read, or for a first
    window with no rows its start (it reads incrementally from there)."""
    _not_samples(table)
    now = ctx.now_ns
    ids = list(ctx.devices) if device_ids is None else list(device_ids)
    marked, chunks = _starts(ctx, detector, ids, key, first_lookback_s)
    c = table.c
    cols = [c.device_id, c.ts_ns, *[c[name] for name in columns]]
    out: dict[int, list[tuple]] = {}
    marks: dict[int, int] = {}
    for part in _budgeted(ctx, marked, chunks, budget):
        for group in _groups(part):
            q = select(*cols).where(
                c.device_id.in_(list(group)), c.ts_ns > min(group.values()), c.ts_ns <= now, *where
            )
            for row in ctx.conn.execute(q).all():
                if row[1] > part[row[0]]:
                    out.setdefault(row[0], []).append(row)
        for d in part:
            if d not in marked and d not in out:
                marks[d] = part[d]
    for d, rows in out.items():
        rows.sort(key=lambda r: r[1])
        marks[d] = rows[-1][1]
    return out, marks


def read_new_sums(
    ctx: PassContext,
    detector: str,
    table: Table,
    groups: Sequence[str],
    aggregates: Callable[[Any, Any], Sequence[Any]],
    sub_ns: int,
    *,
    device_ids: Iterable[int] | None = None,
    where: Sequence[Any] = (),
    key: str = "",
    first_lookback_s: float | None = None,
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """Like ``read_new_rows``, but summed in the database: one GROUP BY over all the devices read
    together, per device, ``groups`` columns and sub-window of ``sub_ns`` (aligned), so a pass
    fetches a few rows per device, not one per sample. (Not for raw samples, which sit in chunks
    too: ``read_new_sample_sums``.)

    ``aggregates(columns, x)`` gives the sums to take, where ``x`` is the sample's time in seconds
    from its sub-window's start. Each device's own start is joined in (a ``VALUES`` list), so a
    row is counted once even when the devices' marks differ. Returns per device the rows
    ``(device_id, *groups, sub_start_ns, *aggregates, newest_ts_ns)``, and the new marks."""
    _not_samples(table)
    now = ctx.now_ns
    ids = list(ctx.devices) if device_ids is None else list(device_ids)
    marked, chunks = _starts(ctx, detector, ids, key, first_lookback_s)
    c = table.c
    sub: Any = literal_column(str(int(sub_ns)))
    bucket = (c.ts_ns - c.ts_ns % sub).label("sub_start")
    x = cast(c.ts_ns % sub, Float) / 1e9
    group_cols = [c[g] for g in groups]
    cols = [c.device_id, *group_cols, bucket, *aggregates(c, x), func.max(c.ts_ns)]
    out: dict[int, list[tuple]] = {}
    marks: dict[int, int] = {}
    for part in _budgeted(ctx, marked, chunks):
        m = (
            values(column("device_id", Integer), column("lo", BigInteger), name="marks")
            .data([(d, lo) for d, lo in part.items()])
            .cte("marks")
        )
        q = (
            select(*cols)
            .select_from(table.join(m, m.c.device_id == c.device_id))
            .where(
                c.device_id.in_(list(part)),
                c.ts_ns > min(part.values()),
                c.ts_ns <= now,
                c.ts_ns > m.c.lo,
                *where,
            )
            .group_by(c.device_id, *group_cols, bucket)
        )
        for row in ctx.conn.execute(q).all():
            out.setdefault(row[0], []).append(tuple(row))
        for d in part:
            if d not in marked and d not in out:
                marks[d] = part[d]
    for d, rows in out.items():
        rows.sort(key=lambda r: r[len(groups) + 1])
        marks[d] = max(r[-1] for r in rows)
    return out, marks


# ------------------------------------------------------------------------------ raw samples
#
# Raw samples sit in the tail tables (rows an older collector wrote, not yet folded) and in
# chunks (each batch's samples as the collector stores them, and what compaction folded): they
# are read from both, merged, in columns (``chunk_reader.read_samples``, with a NOT NULL
# condition where a detector needs a reading), one read per group of devices, and
# what a detector sums is summed here in numpy, not in SQL.

GROUP_SPAN_NS = 60 * NS  # devices whose starts lie within this of the group's earliest are read together


def _groups(part: dict[int, int]) -> list[dict[int, int]]:
    """The devices of ``part`` in groups read by one range each: sorted by start, a new group
    where a start lies more than ``GROUP_SPAN_NS`` after its group's earliest (usually one group:
    the marks of the last pass lie within seconds of each other, first windows start together).
    A device's rows before its own start are read (at most that span's) and dropped."""
    out: list[dict[int, int]] = []
    low = 0
    for d in sorted(part, key=lambda d: (part[d], d)):
        if not out or part[d] - low > GROUP_SPAN_NS:
            out.append({})
            low = part[d]
        out[-1][d] = part[d]
    return out


@dataclass
class SampleGroup:
    """Devices read together, and their new samples: those after each one's start (its mark, or
    its first window's start), up to now, that carry the readings asked for; sorted by time,
    device, GPU."""

    starts: dict[int, int]
    first: set[int]  # the devices reading their first window (no mark yet)
    rows: ChunkRows


def new_sample_groups(
    ctx: PassContext,
    detector: str,
    kind: str,
    columns: Sequence[str],
    *,
    texts: Sequence[str] = (),
    present: Sequence[str] = (),
    device_ids: Iterable[int] | None = None,
    key: str = "",
    first_lookback_s: float | None = None,
    budget: bool = True,
) -> Iterator[SampleGroup]:
    """The new raw samples (``kind`` "gpu" or "host") of the devices, one read of the tail and the
    chunks (``chunk_reader.read_samples``) per group of devices (``_groups``: usually one per pass;
    first windows chunk by chunk within the catch-up budget, as ``read_new_rows``). ``columns``
    are the float readings to read, ``texts`` the host text columns, ``present`` the readings a
    sample must carry (``IS NOT NULL``) to be read at all. Lazily: a group is read when the caller
    asks for it."""
    import numpy as np

    now = ctx.now_ns
    ids = list(ctx.devices) if device_ids is None else list(device_ids)
    marked, chunks = _starts(ctx, detector, ids, key, first_lookback_s)
    for part in _budgeted(ctx, marked, chunks, budget):
        for starts in _groups(part):
            members = sorted(starts)
            rows = read_samples(
                ctx.conn,
                kind,
                members,
                min(starts.values()) + 1,
                now + 1,
                columns=columns,
                texts=texts,
                present=present,
            )
            if len(rows):
                devs = np.array(members, dtype=np.int64)
                lows = np.array([starts[d] for d in members], dtype=np.int64)
                keep = rows.ts_ns > lows[np.searchsorted(devs, rows.device_id)]
                if not keep.all():
                    rows = take_rows(rows, keep)
            yield SampleGroup(starts, {d for d in starts if d not in marked}, rows)


def _column_lists(rows: ChunkRows, names: Sequence[str]) -> list[list[Any]]:
    """Each named column of ``rows`` as a Python list, None for NULL (as the tail tables give it)."""
    out: list[list[Any]] = []
    for name in names:
        if name in rows.texts:
            out.append(rows.texts[name])
        elif name == MIXED_GPU_COLUMN and name not in rows.values:
            out.append(rows.gpu_index.tolist())
        else:
            out.append([None if v != v else v for v in rows.values[name].tolist()])
    return out


def read_new_samples(
    ctx: PassContext,
    detector: str,
    kind: str,
    columns: Sequence[str],
    *,
    present: Sequence[str] = (),
    device_ids: Iterable[int] | None = None,
    key: str = "",
    first_lookback_s: float | None = None,
    budget: bool = True,
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """``read_new_rows`` for raw samples (``kind`` "gpu" or "host"), wherever they sit: rows
    ``(device_id, ts_ns, *columns)`` per device in time order (``columns`` may name "gpu_index"
    for GPU samples and the host text columns; None for NULL), and the new marks, with the same
    meaning. ``present``: the readings a sample must carry to be read (``IS NOT NULL``), as the
    ``where`` of ``read_new_rows``."""
    texts = [n for n in columns if kind == "host" and n in HOST_TEXT_COLUMNS]
    floats = [n for n in columns if n not in texts and not (kind == "gpu" and n == MIXED_GPU_COLUMN)]
    groups = new_sample_groups(
        ctx,
        detector,
        kind,
        floats,
        texts=texts,
        present=present,
        device_ids=device_ids,
        key=key,
        first_lookback_s=first_lookback_s,
        budget=budget,
    )
    return sample_rows(groups, columns)


def sample_rows(
    groups: Iterable[SampleGroup], columns: Sequence[str], *, only: Iterable[int] | None = None
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """``read_new_samples`` of groups already read: the rows ``(device_id, ts_ns, *columns)`` per
    device (of the devices ``only``, when given) and their marks."""
    import numpy as np

    keep = None if only is None else set(only)
    out: dict[int, list[tuple]] = {}
    marks: dict[int, int] = {}
    for group in groups:
        r = group.rows
        if keep is not None and len(r) and not keep.issuperset(group.starts):
            r = take_rows(r, np.isin(r.device_id, list(keep)))
        if len(r):
            for row in zip(r.device_id.tolist(), r.ts_ns.tolist(), *_column_lists(r, columns)):
                out.setdefault(row[0], []).append(row)
        for d in group.first:
            if d not in out and (keep is None or d in keep):
                marks[d] = group.starts[d]
    for d, rows in out.items():
        marks[d] = rows[-1][1]  # rows come sorted by time
    return out, marks


# What ``read_new_sample_sums``' aggregates take of a column (float64, NaN for NULL) per group, as
# SQL would: COUNT (of values), SUM, MAX and MIN (None where a group has no value).
COUNT, SUM, MAX, MIN = "count", "sum", "max", "min"


def read_new_sample_sums(
    ctx: PassContext,
    detector: str,
    kind: str,
    groups: Sequence[str],
    columns: Sequence[str],
    aggregates: Callable[[dict[str, np.ndarray], np.ndarray], Sequence[tuple[str, np.ndarray]]],
    sub_ns: int,
    *,
    present: Sequence[str] = (),
    device_ids: Iterable[int] | None = None,
    key: str = "",
    first_lookback_s: float | None = None,
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """``read_new_sums`` for raw samples, wherever they sit (``kind`` "gpu" or "host"): the new
    samples of the devices (``new_sample_groups``) summed in numpy per device, ``groups`` (none,
    or "gpu_index" for GPU samples) and sub-window of ``sub_ns`` (aligned); ``present`` as
    ``read_new_samples``'.

    ``aggregates(values, x)`` gives the sums to take as ``(how, array)`` pairs, ``how`` one of
    ``COUNT``, ``SUM``, ``MAX``, ``MIN`` and the array one value a row (NaN for NULL, left out as
    SQL leaves NULLs out); ``values`` are the ``columns`` read (float64, NaN for NULL) and ``x`` is
    the sample's time in seconds from its sub-window's start. Returns per device the rows
    ``(device_id, *groups, sub_start_ns, *aggregates, newest_ts_ns)`` in sub-window order (Python
    numbers: they go into progress states), and the new marks, as ``read_new_sums`` does."""

    groups_read = new_sample_groups(
        ctx,
        detector,
        kind,
        columns,
        present=present,
        device_ids=device_ids,
        key=key,
        first_lookback_s=first_lookback_s,
    )
    return sample_sums(groups_read, kind, groups, aggregates, sub_ns)


def sample_sums(
    groups_read: Iterable[SampleGroup],
    kind: str,
    groups: Sequence[str],
    aggregates: Callable[[dict[str, np.ndarray], np.ndarray], Sequence[tuple[str, np.ndarray]]],
    sub_ns: int,
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """``read_new_sample_sums`` of groups already read."""
    if any(g != MIXED_GPU_COLUMN or kind != "gpu" for g in groups):
        raise ValueError(f"samples are grouped by GPU only, not {list(groups)}")
    out: dict[int, list[tuple]] = {}
    marks: dict[int, int] = {}
    for group in groups_read:
        r = group.rows
        if len(r):
            _sum_rows(r, groups, aggregates, sub_ns, out)
        for d in group.first:
            if d not in out:
                marks[d] = group.starts[d]
    for d, rows in out.items():
        rows.sort(key=lambda r: r[len(groups) + 1])
        marks[d] = max(r[-1] for r in rows)
    return out, marks


def _sum_rows(
    r: ChunkRows,
    groups: Sequence[str],
    aggregates: Callable[[dict[str, np.ndarray], np.ndarray], Sequence[tuple[str, np.ndarray]]],
    sub_ns: int,
    out: dict[int, list[tuple]],
) -> None:
    """``read_new_sample_sums``' GROUP BY: add the rows of ``r`` summed per device, GPU (when
    grouped by it) and sub-window to ``out``."""
    import numpy as np

    ts = r.ts_ns
    offset = ts % int(sub_ns)
    keys = [r.device_id, *([r.gpu_index] if groups else []), ts - offset]
    order = np.lexsort(keys[::-1])  # by device, GPU, sub-window
    sorted_keys = [k[order] for k in keys]
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for k in sorted_keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    sums: list[list[Any]] = []
    for how, a in aggregates(r.values, offset.astype(np.float64) / 1e9):
        v = np.asarray(a, dtype=np.float64)[order]
        valid = ~np.isnan(v)
        n = np.add.reduceat(valid.astype(np.int64), starts).tolist()
        if how == COUNT:
            sums.append(n)
            continue
        if how == SUM:
            got = np.add.reduceat(np.where(valid, v, 0.0), starts)
        elif how == MAX:
            got = np.maximum.reduceat(np.where(valid, v, -np.inf), starts)
        elif how == MIN:
            got = np.minimum.reduceat(np.where(valid, v, np.inf), starts)
        else:
            raise ValueError(f"unknown aggregate {how!r}")
        sums.append([g if k else None for g, k in zip(got.tolist(), n)])
    newest = np.maximum.reduceat(ts[order], starts).tolist()
    heads = [k[starts].tolist() for k in sorted_keys]
    for i, head in enumerate(zip(*heads)):
        out.setdefault(head[0], []).append((*head, *(s[i] for s in sums), newest[i]))


def add_sums(subs: list[list[float]], start: int, sums: Sequence[float]) -> None:
    """Add summed values to the sub-window starting at ``start`` (``[start, *sums]`` rows, in
    time order): what ``add_point`` and ``add_sum`` do one reading at a time."""
    for s in reversed(subs):
        if s[0] == start:
            for i, v in enumerate(sums, 1):
                s[i] += v or 0
            return
        if s[0] < start:
            break
    subs.append([start, *[v or 0 for v in sums]])
    subs.sort(key=lambda s: s[0])


# ------------------------------------------------------------------------------ window sums


def add_point(subs: list[list[float]], ts_ns: int, y: float, sub_ns: int) -> None:
    """Add (t, y) to the sub-window it falls in: [start_ns, n, sx, sy, sxx, sxy, syy] with x in
    seconds from the sub-window's start (small numbers: no precision lost to epoch seconds)."""
    start = ts_ns - ts_ns % sub_ns
    target: list[float] | None = None
    for s in reversed(subs):
        if s[0] == start:
            target = s
            break
        if s[0] < start:
            break
    if target is None:
        target = [start, 0, 0.0, 0.0, 0.0, 0.0, 0.0]
        subs.append(target)
        subs.sort(key=lambda s: s[0])
    _accumulate(target, (ts_ns - start) / NS, y)


def _accumulate(s: list[float], x: float, y: float) -> None:
    s[1] += 1
    s[2] += x
    s[3] += y
    s[4] += x * x
    s[5] += x * y
    s[6] += y * y


def trim(subs: list[list[float]], keep_from_ns: int) -> list[list[float]]:
    return [s for s in subs if s[0] >= keep_from_ns]


@dataclass(frozen=True)
class Fit:
    n: int
    slope_per_s: float  # y units per second
    r2: float
    mean_y: float
    first_ns: int  # the origin's sub-window start
    span_s: float  # from the first sub-window's start to the last's end, roughly


def fit(subs: Sequence[Sequence[float]], sub_ns: int) -> Fit | None:
    """Least squares over the summed sub-windows (each shifted to the first one's origin)."""
    if not subs:
        return None
    origin = int(subs[0][0])
    n = sx = sy = sxx = sxy = syy = 0.0
    for s in subs:
        d = (s[0] - origin) / NS
        k = s[1]
        n += k
        sx += s[2] + k * d
        sy += s[3]
        sxx += s[4] + 2 * d * s[2] + k * d * d
        sxy += s[5] + d * s[3]
        syy += s[6]
    if n < 2:
        return None
    vx = n * sxx - sx * sx
    vy = n * syy - sy * sy
    cov = n * sxy - sx * sy
    if vx <= 0:
        return None
    slope = cov / vx
    r2 = 1.0 if vy <= 1e-12 * max(1.0, abs(syy)) else max(0.0, min(1.0, cov * cov / (vx * vy)))
    span = (subs[-1][0] - origin + sub_ns) / NS
    return Fit(int(n), slope, r2, sy / n, origin, span)


def sum_pairs(subs: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(n, sum of y) over sub-windows of [start, n, sum] rows."""
    return sum(s[1] for s in subs), sum(s[2] for s in subs)


def add_sum(subs: list[list[float]], ts_ns: int, y: float, sub_ns: int) -> None:
    """Add y to the [start_ns, n, sum] sub-window of ts_ns."""
    start = ts_ns - ts_ns % sub_ns
    for s in reversed(subs):
        if s[0] == start:
            s[1] += 1
            s[2] += y
            return
        if s[0] < start:
            break
    subs.append([start, 1, y])
    subs.sort(key=lambda s: s[0])


def fmt_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
