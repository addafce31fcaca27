"""Read planning: which resolution a chart gets, and which source serves each stretch of a read.

A read asks for buckets of ``step_s`` seconds and gets them from the coarsest source that can
serve each stretch of time: day rollups, then hour rollups, then minute rollups, then the raw
samples grouped in SQL for what is not rolled up yet (see ``plan``). A chart of the last 24 h is ~1440
minute-rollup rows per GPU plus a minute or two of raw rows at its right edge, which is how it
reaches "now". Without rollup tables (a database no rollup job has touched) every read falls
back to grouping raw rows, which is correct and only slower.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import inspect
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, ceil_to, floor_to
from fleetscope.collector.storage.rollup_schema import STEPS_S
from fleetscope.collector.storage.rollups import read_progress

MAX_POINTS = 1500  # per series: more than a chart's width in pixels buys nothing
# All series of one chart together (a device's GPUs): what Vega draws in well under a second.
POINTS_PER_CHART = 1500
# Candidate steps per source; a source serves a step only if its buckets nest inside it.
# No automatic 1 s step: a bucket needs two samples (at the usual 1 s interval) for a counter's
# delta, hence a disk or network rate; a caller that wants single samples asks for step_s=1.
RAW_STEPS_S = (2, 5, 10)
ROLLUP_STEPS_S = (60, 120, 300, 600, 3600, 7200, 21600, 86400)

Plan = list[tuple[int, int, int]]  # (table step: 86400, 3600, 60 or 0 for raw rows, lo, hi)
STORED_STEPS_S = tuple(sorted(STEPS_S, reverse=True))  # the rollup tiers, coarsest first
TIER_NAMES = {86400: "day", 3600: "hour", 60: "minute", 0: "raw"}
TIER_ORDER = ("day", "hour", "minute", "raw")  # how a caption lists the sources that served a read


def resolution_for(span_ns: int, *, max_points: int = MAX_POINTS) -> int:
    """The smallest step (s) that keeps a series of ``span_ns`` under ``max_points``."""
    span_s = max(1, span_ns // NS)
    for step in RAW_STEPS_S + ROLLUP_STEPS_S:
        if span_s / step <= max_points:
            return step
    return ROLLUP_STEPS_S[-1]


# A comparison chart (groups side by side over a window) needs few points; each is a merged
# histogram, and reading one per device per minute for a day is what made it slow.
COMPARE_POINTS = 120
COMPARE_DAYS_FROM = 20  # days: from here a comparison chart has a point a day (20 or more)


def comparison_step(span_ns: int) -> int:
    """The step of a comparison chart: at most ``COMPARE_POINTS`` points; whole hours from 12 h
    on, so that hour rollups serve it (one row per device and hour, not sixty), and whole days
    from ``COMPARE_DAYS_FROM`` on, so that day rollups do (a month is 30 rows per device, where
    6-hour buckets read 720 hour rows each)."""
    if span_ns >= COMPARE_DAYS_FROM * 86400 * NS:
        return 86400
    step = resolution_for(span_ns, max_points=COMPARE_POINTS)
    if step < 3600 and span_ns >= 12 * 3600 * NS:
        return 3600
    return step


def describe_resolution(step_s: int, sources: Sequence[str]) -> str:
    """'1 min buckets from minute rollups + raw samples', for a chart caption."""
    if step_s % 86400 == 0:
        size = f"{step_s // 86400} d"
    elif step_s % 3600 == 0:
        size = f"{step_s // 3600} h"
    elif step_s % 60 == 0:
        size = f"{step_s // 60} min"
    else:
        size = f"{step_s} s"
    names = {"day": "day rollups", "hour": "hour rollups", "minute": "minute rollups", "raw": "raw samples"}
    return f"{size} buckets from " + " + ".join(names[s] for s in sources) if sources else f"{size} buckets"


def plan(lo: int, hi: int, tiers: Sequence[tuple[int, int | None]]) -> Plan:
    """Split [lo, hi) into (table step, lo, hi) stretches, coarsest source first.

    ``tiers`` is [(86400, day progress), (3600, hour progress), (60, minute progress)] (those
    allowed for this read, coarsest first);
    a tier serves only whole buckets of its own below its progress mark; the edges it cannot
    serve go to the next finer tier, and whatever is left to the raw samples (step 0).
    """
    if lo >= hi:
        return []
    if not tiers:
        return [(0, lo, hi)]
    (step_s, progress), rest = tiers[0], tiers[1:]
    step = step_s * NS
    a = ceil_to(lo, step)
    b = min(floor_to(hi, step), floor_to(progress, step)) if progress else a
    if a >= b:
        return plan(lo, hi, rest)
    return plan(lo, a, rest) + [(step_s, a, b)] + plan(b, hi, rest)


_rollups_seen: set[str] = set()


def _has_rollups(session: Session) -> bool:
    """Whether the rollup tables exist (a database older than them, or never rolled, has none)."""
    conn = session.connection()
    key = conn.engine.url.render_as_string(hide_password=True)
    if key in _rollups_seen:
        return True
    if inspect(conn).has_table("rollup_progress"):
        _rollups_seen.add(key)  # only a positive answer is cached: the job may create them later
        return True
    return False


def _progress(session: Session, device_ids: Sequence[int]) -> dict[tuple[int, int], int]:
    if not device_ids or not _has_rollups(session):
        return {}
    return read_progress(session.connection(), device_ids)


def groups_by_plan(
    session: Session, device_ids: Sequence[int], lo: int, hi: int, step_s: int | None
) -> list[tuple[list[int], Plan]]:
    """Devices that share a read plan (same progress marks) are read with one query per stretch.

    ``step_s=None`` (one bucket for the whole window) may use every tier; a step uses only the
    tiers whose buckets nest inside it.
    """
    progress = _progress(session, device_ids)
    out: dict[tuple, list[int]] = {}
    plans: dict[tuple, Plan] = {}
    for d in device_ids:
        tiers = [(t, progress.get((d, t))) for t in STORED_STEPS_S if step_s is None or step_s % t == 0]
        tiers = [(t, p) for t, p in tiers if p]
        key = tuple(tiers)
        out.setdefault(key, []).append(d)
        if key not in plans:
            plans[key] = plan(lo, hi, tiers)
    return [(ids, plans[key]) for key, ids in out.items()]
