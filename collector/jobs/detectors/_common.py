"""What every detector shares: the pass context (devices, progress marks, open incidents read
once per pass), the changes a detector hands back to be written in one transaction, the
incremental reader of raw rows, and the windowed sums that least squares and means are made of.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, select

from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.storage.incident_lifecycle import DerivedKey, OpenIncident

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

    def operations(self, device_id: int) -> set[str]:
        """The latency operations this device has timed (discovered now and then, see ``NameCache``)."""
        return set() if self.names is None else self.names.operations(self.conn, device_id, self.now_ns)

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
    progress: dict[tuple[int, str], tuple[int, dict]] = field(default_factory=dict)  # (device, key) -> (until, state)
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

    def operations(self, conn: Connection, device_id: int, now_ns: int) -> set[str]:
        got = self._names.get(device_id)
        # A device that timed nothing yet is looked at again sooner: its program may just be starting.
        if got is not None and now_ns - got[0] < (self.ttl_ns if got[1] else min(self.ttl_ns, EMPTY_TTL_NS)):
            return got[1]
        from sqlalchemy import func

        from fleetscope.collector.storage.schema import latency_histograms

        h = latency_histograms.c
        found: set[str] = set()
        last = ""
        while True:
            name = conn.execute(
                select(func.min(h.name)).where(h.device_id == device_id, h.name > last)
            ).scalar()
            if name is None:
                break
            found.add(name)
            last = name
        self._names[device_id] = (now_ns, found)
        return found


def loads(value: Any) -> Any:
    """A JSON column or a JSON text column: SQLite hands back text, psycopg parsed objects."""
    if value is None:
        return None
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# ---------------------------------------------------------------------------------- reading


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
) -> tuple[dict[int, list[tuple]], dict[int, int]]:
    """Rows of ``table`` (``device_id``, ``ts_ns`` first, then ``columns``) that arrived since this
    detector's mark for each device: timestamps after the device's ``until_ns``, up to now.

    A first pass starts ``first_lookback_s`` back (what the detector's window needs), a pass after
    a long pause at most ``settings.lookback_s`` back. Devices are read together, one query per
    group of devices whose marks lie within a minute of each other (usually one group), with
    ``device_id IN (...)`` and a range on ``ts_ns``, which the (device_id, ts_ns) indexes serve.
    Devices not heard from since their mark are skipped. Returns the rows per device in time
    order, and each device's new mark (the newest timestamp read)."""
    now = ctx.now_ns
    floor = now - int(ctx.settings.lookback_s * NS)
    first = now - int(min(ctx.settings.lookback_s, first_lookback_s or ctx.settings.lookback_s) * NS)
    ids = list(ctx.devices) if device_ids is None else list(device_ids)
    lo: dict[int, int] = {}
    for d in ids:
        got = ctx.progress.get((detector, d, key))
        start = first if got is None else max(got[0], floor)
        # last_seen_ns is when data last arrived (collector time), ts_ns the sample's own time
        # on the same base: nothing newer than the mark can have arrived before it (a minute of
        # slack for a stream's skew correction).
        if ctx.devices[d].last_seen_ns < start - 60 * NS:
            continue
        lo[d] = start
    groups: dict[int, list[int]] = {}
    for d, start in lo.items():
        groups.setdefault(start // (60 * NS), []).append(d)
    c = table.c
    cols = [c.device_id, c.ts_ns, *[c[name] for name in columns]]
    out: dict[int, list[tuple]] = {}
    for members in groups.values():
        low = min(lo[d] for d in members)
        for i in range(0, len(members), 900):
            chunk = members[i : i + 900]
            q = select(*cols).where(c.device_id.in_(chunk), c.ts_ns > low, c.ts_ns <= now, *where)
            for row in ctx.conn.execute(q).all():
                if row[1] > lo[row[0]]:
                    out.setdefault(row[0], []).append(row)
    marks: dict[int, int] = {}
    for d, rows in out.items():
        rows.sort(key=lambda r: r[1])
        marks[d] = rows[-1][1]
    return out, marks


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
