"""Repeated OOM, and the lifecycle step for event incidents.

**Repeated OOM**: the same job or process (by process name: the OOM incident's ``process_name``,
or its facts' ``process_name``/``victim_process``) running out of memory again under another pid
(it was restarted) within ``oom_repeat_window_s`` on the same device gives a ``repeated_oom``
incident naming both pids and both OOM incidents. Further restarts that OOM refresh it. It is an
event kind: the lifecycle step resolves it after the quiet period like the OOMs it groups.

OOM incidents are read incrementally by id (one fleet-wide mark, device 0), plus open OOM
incidents seen again since the last pass (grouped repeats move ``last_seen_ns`` and may carry a
new pid).

**The lifecycle step**: ``resolve_quiet_incidents`` each pass, and hints for event incidents
(OOM, Xid, ...) that have none yet, computed once when they arrive.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import NS, Changes, Hints, Open, PassContext, Refresh, loads
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.vocabulary import (
    DERIVED_KINDS,
    INCIDENT_OPEN,
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
    KIND_REPEATED_OOM,
    ORIGIN_AGENT,
    RECORD_KINDS,
    SEVERITY_ERROR,
)

OOM_KINDS = (KIND_CUDA_OOM, KIND_HOST_OOM, KIND_JETSON_MEMORY, KIND_MEMORY_ALLOC_FAILURE)
NAME = KIND_REPEATED_OOM
FLEET = 0  # the fleet-wide progress row's device id
BATCH = 1000

_I = Incident.__table__.c


def _process(row: Any) -> tuple[str, int | None]:
    facts = loads(row.facts) or {}
    name = row.process_name or facts.get("process_name") or facts.get("victim_process") or facts.get("process") or ""
    pid = row.pid if row.pid is not None else facts.get("pid", facts.get("victim_pid"))
    try:
        pid = int(pid) if pid is not None else None
    except (TypeError, ValueError):
        pid = None
    return str(name), pid


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    until, state = ctx.mark(NAME, FLEET)
    last_id = int(state.get("last_id", 0))
    seen_ns = int(until or 0)
    cols = (_I.id, _I.device_id, _I.kind, _I.ts_ns, _I.last_seen_ns, _I.pid, _I.process_name, _I.facts)
    # The newest id first: the mark may move up to it even when no OOM is among the new rows,
    # and an OOM written after this read has a higher id and is read next time.
    top = ctx.conn.execute(select(_I.id).order_by(_I.id.desc()).limit(1)).scalar() or 0
    window_ns = int(s.oom_repeat_window_s * NS)
    q = select(*cols).where(_I.id > last_id, _I.id <= top, _I.kind.in_(OOM_KINDS), _I.origin == ORIGIN_AGENT)
    if until is None:  # a first pass looks back over the repeat window only
        q = q.where(_I.ts_ns >= ctx.now_ns - window_ns)
    fresh = ctx.conn.execute(q.order_by(_I.id).limit(BATCH)).all()
    again = ctx.conn.execute(
        select(*cols).where(_I.state == INCIDENT_OPEN, _I.kind.in_(OOM_KINDS), _I.id <= last_id,
                            _I.last_seen_ns > seen_ns)
    ).all() if last_id else []
    procs: dict[str, list] = state.get("procs", {})  # "device|name" -> [[pid, ts_ns, incident_id, kind], ...]
    for row in sorted([*fresh, *again], key=lambda r: r.last_seen_ns):
        name, pid = _process(row)
        if not name or pid is None or row.device_id not in ctx.devices:
            continue
        ts = int(row.last_seen_ns)
        k = f"{row.device_id}|{name}"
        seen = [e for e in procs.get(k, []) if e[1] >= ts - window_ns]
        earlier = [e for e in seen if e[0] != pid]
        if not any(e[0] == pid for e in seen):
            seen.append([pid, ts, int(row.id), row.kind])
        procs[k] = seen
        if earlier:
            _repeat(ctx, ch, row.device_id, name, earlier[0], [pid, ts, int(row.id), row.kind], len({e[0] for e in seen}))
    cutoff = ctx.now_ns - window_ns
    procs = {k: v for k, v in ((k, [e for e in v if e[1] >= cutoff]) for k, v in procs.items()) if v}
    if fresh or again or not until:
        last_id = max([last_id, *(r.id for r in fresh)]) if len(fresh) >= BATCH else max(last_id, top)
        new_seen = max([seen_ns, *(int(r.last_seen_ns) for r in [*fresh, *again])])
        ch.set_progress(FLEET, "", new_seen, {"last_id": last_id, "procs": procs})
    return ch


def _repeat(ctx: PassContext, ch: Changes, d: int, name: str, first: list, latest: list, pids: int) -> None:
    key = DerivedKey(d, KIND_REPEATED_OOM, None, f"proc:{name}"[:200])
    cur = ctx.open.get(key)
    gap_s = (latest[1] - first[1]) / NS
    facts = {"process_name": name, "first_pid": first[0], "pid": latest[0], "first_incident_id": first[2],
             "incident_id": latest[2], "first_ts_ns": first[1], "ts_ns": latest[1], "gap_s": round(gap_s, 3),
             "kinds": sorted({first[3], latest[3]}), "pids": pids}
    title = (f"{name} on {ctx.devices[d].name} ran out of memory again after a restart: pid {first[0]}, "
             f"then pid {latest[0]} {gap_s / 60:.0f} min later")
    if cur is None and not any(isinstance(op, Open) and op.key == key for op in ch.ops):
        hints = hint_math.hints_for(ctx.conn, d, latest[1], ctx.settings, exclude=KIND_REPEATED_OOM)
        ch.ops.append(Open(key, first[1], SEVERITY_ERROR, title, facts, last_seen_ns=latest[1], hints=hints,
                           pid=latest[0], process_name=name))
    else:
        ch.ops.append(Refresh(cur.id if cur else None, latest[1], facts=facts, title=title, key=key))


def lifecycle(ctx: PassContext) -> Changes:
    """Resolve quiet event incidents; give event incidents that arrived since the last pass their hints."""
    ch = Changes("lifecycle", resolve_quiet_s=ctx.settings.quiet_period_s)
    until, state = ctx.mark("lifecycle", FLEET)
    last_id = int(state.get("last_id", 0))
    event_kinds = sorted(DERIVED_KINDS | RECORD_KINDS | {KIND_REPEATED_OOM})
    q = select(_I.id, _I.device_id, _I.ts_ns, _I.hints).where(
        _I.id > last_id, _I.kind.not_in(event_kinds), _I.origin == ORIGIN_AGENT
    )
    if until is None:  # a first pass: only what arrived lately, not the whole history
        # By arrival, not by when it happened: a drone's backlog brings OOMs hours old, and one
        # that landed before this pass would otherwise be passed over for good (the mark below
        # moves past it).
        q = q.where(_I.received_ns >= ctx.now_ns - int(ctx.settings.lookback_s * NS))
    rows = ctx.conn.execute(q.order_by(_I.id).limit(200)).all()
    for r in rows:
        if loads(r.hints):
            continue
        hints = hint_math.hints_for(ctx.conn, r.device_id, r.ts_ns, ctx.settings)
        if hints:
            ch.ops.append(Hints(r.id, hints))
    if rows or until is None:
        new_last = max([last_id, *(r.id for r in rows)])
        if until is None and not rows:
            new_last = ctx.conn.execute(select(_I.id).order_by(_I.id.desc()).limit(1)).scalar() or 0
        ch.set_progress(FLEET, "", ctx.now_ns, {"last_id": new_last})
    return ch
