"""The one way to write incidents: ``write_incidents``, inside the caller's transaction.

Incidents reach the database two ways, and both come here: the ingest writer
(``storage.writer``) writes each group's incidents in the group's transaction, and a scan import
(``ingest.scan_import``) writes the findings of old log files in its own. Both hand over rows as
``dict``s with the ``incidents`` table's columns (``facts`` and ``context`` as Python objects) and a
DB-API cursor of the connection their transaction runs on. (Detectors open, refresh and resolve
their derived incidents through ``storage.incident_lifecycle``, not here.)

Grouping: repeats are one incident with a count
-----------------------------------------------
An OOM loop or a flapping GPU reports the same failure again and again; stored one row each, a
person would read a flood. An incident an agent sends (origin "agent") that repeats an OPEN
incident of the same device, the same ``kind``, the same ``gpu_index`` and the same
``group_key`` is folded into it when it happened at most ``GROUP_WINDOW_NS`` (5 minutes; the
``group_window_ns`` keyword) after that incident's ``last_seen_ns``: ``count`` grows by one,
``last_seen_ns`` moves to it, ``updated_ns`` to the collector time of the change, the severity
becomes the worse of the two, and its facts, time and title are kept under ``facts["last"]``
beside the first occurrence's, which stay the incident's own (``title``, ``facts``, ``excerpt``,
``source``; ``ts_ns`` is when it started). ``gpu_index``, ``pid`` and ``process_name`` left empty
by the first occurrence are filled in by a later one.

* Only an open incident absorbs repeats: one resolved (by the lifecycle job after its quiet
  period) stays history, and the next occurrence opens a new incident.
* ``group_key`` separates failures of one kind that are not the same thing: "xid:<code>" (or
  "sxid:<code>") for ``gpu_xid``, so Xid 13 and Xid 79 on one GPU are two incidents; empty for
  the other event kinds. A row may name its own.
* ``gpu_index``, ``pid`` and ``process_name`` are filled from the facts the reporters give:
  ``gpu_index`` (NVML), ``device_index`` (the CUDA OOM classifier), the SDK's ``device``
  ("cuda:1"), a kernel Xid line's PCI address through the GPU inventory the device registered;
  ``pid`` or ``victim_pid`` (the host OOM killer's victim); ``process_name`` or
  ``victim_process``. A ``pid`` the CUDA OOM message names for *another* process
  (``process_in_use_is_self`` false) is not the process that failed and is not taken.
* Never grouped: scan imports (origin "import", stored resolved with ``ended_ns`` = their time:
  history from old files, neither absorbing live repeats nor absorbed by them), rows of other
  origins, and record kinds (``vocabulary.RECORD_KINDS``, e.g. a TensorRT benchmark), which are
  stored resolved: records, not problems, never open.

Xid once
--------
On a server two reporters see the same Xid, and both are on by default: NVML's event thread
(incidents with ``source`` "nvml", facts ``gpu_index``, ``gpu_uuid``, ``pci_bus_id``) and the
driver's kernel-log line read by the Xid classifier (``source`` "kmsg", "journal:kernel" or a
file; facts ``pci_address``, ``pid``, ``process_name``, the message). Without a merge one GPU
fault would be two occurrences. Here a report of one is folded into the matching report of the
other: ONE occurrence. When that is an incident's first occurrence, the incident's ``sources``
fact names both ("kernel_log,nvml") and it keeps both reports' facts and excerpts, each
reporter's own time (``kernel_log_ts_ns``, ``nvml_ts_ns``), and the earlier of the two as its
time; the kernel line's severity, title and ``source`` win: the printed message can refine what
the catalogue says about the code (NVLink Fatal/Nonfatal, Xid 154's recovery action), the title
names the process, and ``source`` stays where the line can be read again. When it is the
incident's latest occurrence, ``facts["last"]`` gets the same merge. Either way ``count`` does
not move: a repeated fault counts once per fault, whichever reporters saw it.

Why the collector merges, and why here:

* The two reports travel separately: NVML's from the sampler on every tick, the kernel line from
  the log pipeline after grouping, each batched by whichever flush comes next (a different batch,
  often a different transaction). An agent that merged would have to hold every Xid back for the
  whole window, across flushes and restarts, and a scan import could never join in.
* In the writer's transaction the merge and the grouping are exactly-once and atomic: a replayed
  batch is skipped before its incidents get here, and a group that rolls back takes its merges
  and counts with it. It works whether both reports are in one batch, in one group of batches,
  or an earlier transaction stored the other, in either order.
* Incidents are rare (a handful a day per device, a burst of tens at worst): one or two indexed
  lookups per device and kind in a call (the open incidents by ``incidents_open``, and for Xids
  the time window by ``incidents_kind_ts``) cost nothing next to ingest's ~200k sample rows/s,
  which never pass through this module.

Matching: same device, kind ``gpu_xid``, same Xid code (``xid``; a fallen-off-the-bus notice's
``implied_xid``), one report from each reporter, neither paired already, timestamps at most
``XID_MERGE_WINDOW_NS`` apart, and the same GPU. A report pairs with at most one other, the
earliest still unpaired, so a burst of sixteen Xid 13 lines and sixteen NVML events is sixteen
occurrences, paired in order (and, grouped, one incident with a count of sixteen).

An incident remembers which of its occurrences are still unpaired, and by which reporter, in
``context["xid_pending"]`` (a list of ``{"reporter", "xid", "ts_ns", "bus", "first"}``, pruned to
the last few merge windows): the rows themselves no longer stand one per report. A row without
that entry (written before grouping, or by a scan import) is one unpaired report at its own time
unless its facts name ``sources`` already.

The GPU is compared by PCI bus address, the one name both reporters give: the kernel line prints
``0000:3b:00``, NVML ``00000000:3B:00.0``; both become (domain, bus, device). An NVML report
without a bus id gets one from the GPU inventory the agent registered (``devices.inventory
["gpus"]``, by UUID, then by index); the kernel line's bus gives the merged incident a
``gpu_index`` the same way when NVML did not name one. Where a bus cannot be known (a redacted or
unparsable address, an NVML event for a GPU it could not identify) the match falls back to
device + code + window: exact on a one-GPU machine, and on a larger one the wrong pairing needs
two GPUs raising the same code within seconds, rarer than the duplicate it removes.

Concurrency: callers hold the device row's lock (the writer has updated every device of its
group earlier in the transaction; the scan import locks the row first; SQLite has one writer),
so two transactions cannot both find "no open incident" (or "no match") for the same device and
both insert, nor both raise one incident's count from the same value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetscope.proto.vocabulary import (
    INCIDENT_OPEN,
    INCIDENT_RESOLVED,
    KIND_GPU_XID,
    ORIGIN_AGENT,
    RECORD_KINDS,
    SEVERITY_RANK,
    SOURCE_KERNEL_LOG,
    SOURCE_NVML,
)

__all__ = ["GROUP_WINDOW_NS", "XID_MERGE_WINDOW_NS", "IncidentsWritten", "pci_bus_key", "write_incidents"]

# The driver prints the Xid line and posts the NVML event from the same error handler,
# microseconds apart. What separates the two reports' timestamps is how each was read: the NVML
# thread stamps an event when its wait returns (within xid_poll_ms), a log line gets the time of
# the agent tick that read it (one sampling interval, plus a followed kern.log's syslog
# buffering), and a batch shifted onto the collector's clock may move by the skew's jitter.
# Ten seconds covers all of that with room; two distinct faults of one code on one GPU closer
# than that still pair one to one, never into a single occurrence.
XID_MERGE_WINDOW_NS = 10 * 10**9

# A repeat of an open incident at most this long after its last occurrence joins it.
GROUP_WINDOW_NS = 5 * 60 * 10**9

# Unpaired Xid reports older than this before an incident's newest one are forgotten: the other
# reporter's copy arrives within seconds, and the list stays small in a long burst.
_PENDING_KEEP_NS = 3 * XID_MERGE_WINDOW_NS
_PENDING_MAX = 256
_PENDING = "xid_pending"  # the context entry

_COLUMNS = ("device_id", "ts_ns", "received_ns", "kind", "severity", "title", "facts", "source", "excerpt", "context")
_JSON_COLUMNS = ("facts", "context")
_BOTH_SOURCES = ",".join(sorted((SOURCE_KERNEL_LOG, SOURCE_NVML)))  # "kernel_log,nvml"

# "0000:3b:00" (kernel line), "00000000:3B:00.0" (NVML), "0000:3B:00.0" (legacy bus id), "3b:00".
_PCI = re.compile(r"^\s*(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.[0-7])?\s*$")
_TORCH_DEVICE = re.compile(r"^\s*(?:cuda|gpu):(\d+)\s*$", re.IGNORECASE)


def pci_bus_key(text: object) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address as the driver or NVML prints it; None if it is not one."""
    if not isinstance(text, str):
        return None
    m = _PCI.match(text)
    if m is None:
        return None
    return int(m.group("domain") or "0", 16), int(m.group("bus"), 16), int(m.group("dev"), 16)


@dataclass(frozen=True)
class IncidentsWritten:
    inserted: int  # new rows
    merged: int  # Xid reports folded into the other reporter's report of the same fault
    grouped: int = 0  # repeats folded into an open incident (its count raised)


def write_incidents(  # type: ignore[no-untyped-def]
    cur, incidents: Sequence[dict], sqlite: bool, *, group_window_ns: int = GROUP_WINDOW_NS
) -> IncidentsWritten:
    """Store ``incidents`` (rows of the ``incidents`` table) with the caller's cursor, inside the
    caller's transaction: repeats of an open incident raise its count, and each Xid reported by
    both NVML and the kernel log is one occurrence (see the module docstring). The input dicts
    are not changed."""
    return _Writing(cur, sqlite, group_window_ns).run(incidents)


# ------------------------------------------------------------------------------ the model


# The lifecycle columns (revision 0003) and what a row that does not name them gets.
_LIFECYCLE_DEFAULTS: dict[str, Any] = {
    "gpu_index": None,
    "pid": None,
    "process_name": "",
    "group_key": "",
    "state": INCIDENT_OPEN,
    "origin": ORIGIN_AGENT,
    "count": 1,
    "ended_ns": None,
    "hints": [],
}
_INSERT_COLUMNS = (*_COLUMNS, *_LIFECYCLE_DEFAULTS, "last_seen_ns", "updated_ns")
_INSERT_JSON_COLUMNS = (*_JSON_COLUMNS, "hints")
_UPDATE_COLUMNS = (
    "ts_ns", "received_ns", "severity", "title", "facts", "source", "excerpt", "context",
    "gpu_index", "pid", "process_name", "count", "last_seen_ns", "updated_ns",
)  # fmt: skip


@dataclass
class _Report:
    """One reporter's report of one Xid: a row about to be written, or an unpaired occurrence
    an incident remembers."""

    reporter: str  # SOURCE_NVML or SOURCE_KERNEL_LOG
    code: int
    ts_ns: int
    bus: tuple[int, int, int] | None = None
    first: bool = False  # the incident's first occurrence (else a later one)

    def to_json(self) -> dict[str, Any]:
        return {"reporter": self.reporter, "xid": self.code, "ts_ns": self.ts_ns,
                "bus": list(self.bus) if self.bus else None, "first": self.first}  # fmt: skip

    @staticmethod
    def from_json(d: Any) -> _Report | None:
        try:
            bus = d.get("bus")
            return _Report(str(d["reporter"]), int(d["xid"]), int(d["ts_ns"]),
                           tuple(int(x) for x in bus) if bus else None, bool(d.get("first")))  # type: ignore[arg-type]  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


@dataclass(eq=False)
class _Incident:
    """An incident this call may write: stored (``id``) or new."""

    row: dict  # every column but id
    id: int | None = None
    pending: list[_Report] = field(default_factory=list)  # unpaired Xid occurrences
    changed: bool = False

    @property
    def groupable(self) -> bool:
        r = self.row
        return r["state"] == INCIDENT_OPEN and r["origin"] == ORIGIN_AGENT and r["kind"] not in RECORD_KINDS


def _xid_code(facts: dict) -> int | None:
    code = facts.get("xid", facts.get("implied_xid"))
    if not isinstance(code, int) or isinstance(code, bool):
        return None  # an SXid (NVSwitch) finding: NVML reports no such event
    return code


def _report(row: dict) -> _Report | None:
    """``row`` as one reporter's report of an Xid, or None when it is not one that can merge."""
    if row["kind"] != KIND_GPU_XID:
        return None
    facts = row["facts"] or {}
    if "sources" in facts:  # merged already
        return None
    code = _xid_code(facts)
    if code is None:
        return None
    if row["source"] == SOURCE_NVML:
        return _Report(SOURCE_NVML, code, int(row["ts_ns"]), pci_bus_key(facts.get("pci_bus_id")))
    # Every other gpu_xid incident is the Xid classifier reading a driver line: from kmsg, the
    # journal, a followed file or an imported one.
    return _Report(SOURCE_KERNEL_LOG, code, int(row["ts_ns"]), pci_bus_key(facts.get("pci_address")))


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _group_key(kind: str, facts: dict) -> str:
    if kind != KIND_GPU_XID:
        return ""
    code = _xid_code(facts)
    if code is not None:
        return f"xid:{code}"
    sxid = _int(facts.get("sxid"))
    return f"sxid:{sxid}" if sxid is not None else ""


def _worse(a: str, b: str) -> str:
    return a if SEVERITY_RANK.get(a, -1) >= SEVERITY_RANK.get(b, -1) else b


def _json(value: Any) -> Any:
    # SQLite hands JSON columns back as text; psycopg has already parsed them.
    return json.loads(value) if isinstance(value, (str, bytes)) else value


class _Inventories:
    """Each device's registered GPUs (read at most once per call, only when a report needs them)."""

    def __init__(self, cur, sqlite: bool) -> None:  # type: ignore[no-untyped-def]
        self._cur = cur
        self._p = "?" if sqlite else "%s"
        self._gpus: dict[int, list[dict]] = {}

    def gpus(self, device_id: int) -> list[dict]:
        got = self._gpus.get(device_id)
        if got is None:
            self._cur.execute(f"SELECT inventory FROM devices WHERE id = {self._p}", (device_id,))
            one = self._cur.fetchone()
            inventory = _json(one[0]) if one and one[0] is not None else {}
            got = [g for g in (inventory or {}).get("gpus") or [] if isinstance(g, dict)]
            self._gpus[device_id] = got
        return got

    def bus_of(self, device_id: int, facts: dict) -> tuple[int, int, int] | None:
        """The bus of the GPU an NVML report names by UUID or index."""
        uuid, index = facts.get("gpu_uuid"), facts.get("gpu_index")
        if uuid is None and index is None:
            return None
        gpus = self.gpus(device_id)
        by_uuid = [g for g in gpus if uuid and g.get("uuid") == uuid]
        by_index = [g for g in gpus if index is not None and g.get("index") == index]
        for g in by_uuid + by_index:
            bus = pci_bus_key(g.get("pci_bus_id"))
            if bus is not None:
                return bus
        return None

    def index_of(self, device_id: int, bus: tuple[int, int, int] | None) -> int | None:
        """The index of the physical GPU (not a MIG instance, which shares its bus) on ``bus``."""
        if bus is None:
            return None
        for g in self.gpus(device_id):
            if not g.get("mig_parent_uuid") and pci_bus_key(g.get("pci_bus_id")) == bus:
                index = g.get("index")
                return index if isinstance(index, int) else None
        return None


# ------------------------------------------------------------------------------ one call


class _Writing:
    """One ``write_incidents`` call: the rows in time order, each paired, grouped or new."""

    def __init__(self, cur, sqlite: bool, group_window_ns: int) -> None:  # type: ignore[no-untyped-def]
        self.cur = cur
        self.sqlite = sqlite
        self.p = "?" if sqlite else "%s"
        self.window = group_window_ns
        self.inventories = _Inventories(cur, sqlite)
        self.known: dict[tuple[int, str], list[_Incident]] = {}  # (device, kind) -> stored and new
        self.new: list[_Incident] = []
        self.merged = self.grouped = 0

    def run(self, incidents: Sequence[dict]) -> IncidentsWritten:
        rows = [self._full(r) for r in incidents]
        self._load(rows)
        for _, row in sorted(enumerate(rows), key=lambda pr: (pr[1]["ts_ns"], pr[0])):
            self._add(row)
        if self.new:
            self._insert([self._final(i) for i in self.new])
        for incidents_of in self.known.values():
            for inc in incidents_of:
                if inc.id is not None and inc.changed:
                    self._update(inc.id, self._final(inc))
        return IncidentsWritten(inserted=len(self.new), merged=self.merged, grouped=self.grouped)

    # -- rows in

    def _full(self, r: dict) -> dict:
        """``r`` with every lifecycle column, those it leaves out derived from its facts."""
        row = {**_LIFECYCLE_DEFAULTS, "last_seen_ns": r["ts_ns"], "updated_ns": r["received_ns"], **r}
        row["facts"] = dict(r.get("facts") or {})
        row["context"] = dict(r.get("context") or {})
        facts, device_id = row["facts"], int(row["device_id"])
        if row["kind"] in RECORD_KINDS and "state" not in r:
            row["state"], row["ended_ns"] = INCIDENT_RESOLVED, row["ts_ns"]
        if not row["group_key"]:
            row["group_key"] = _group_key(row["kind"], facts)
        if row["gpu_index"] is None:
            row["gpu_index"] = self._gpu_index(device_id, row)
        if row["pid"] is None:
            pid = _int(facts.get("pid"))
            if pid is None or facts.get("process_in_use_is_self") is False:
                pid = _int(facts.get("victim_pid"))
            row["pid"] = pid
        if not row["process_name"]:
            name = facts.get("process_name") or facts.get("victim_process") or ""
            row["process_name"] = name[:255] if isinstance(name, str) else ""
        return row

    def _gpu_index(self, device_id: int, row: dict) -> int | None:
        facts = row["facts"]
        for key in ("gpu_index", "device_index"):
            index = _int(facts.get(key))
            if index is not None:
                return index
        device = facts.get("device")
        m = _TORCH_DEVICE.match(device) if isinstance(device, str) else None
        if m:
            return int(m.group(1))
        if row["kind"] == KIND_GPU_XID:  # a kernel line names its GPU by bus
            return self.inventories.index_of(device_id, pci_bus_key(facts.get("pci_address")))
        return None

    def _takes_part(self, row: dict) -> bool:
        """Whether ``row`` may join a stored incident: group into it, or pair with its Xid."""
        return (row["origin"] == ORIGIN_AGENT and row["kind"] not in RECORD_KINDS) or _report(row) is not None

    def _load(self, rows: list[dict]) -> None:
        """The stored incidents the rows may join, per (device, kind): its open ones seen
        recently enough, and for Xids every one within the merge window."""
        spans: dict[tuple[int, str], tuple[int, int]] = {}
        for row in rows:
            if not self._takes_part(row):
                continue
            key = (int(row["device_id"]), row["kind"])
            lo, hi = spans.get(key, (row["ts_ns"], row["ts_ns"]))
            spans[key] = (min(lo, row["ts_ns"]), max(hi, row["ts_ns"]))
        cols = ", ".join(("id", *_INSERT_COLUMNS))
        p = self.p
        for (device_id, kind), (lo, hi) in spans.items():
            found: dict[int, tuple] = {}
            # incidents_open (state, device_id, kind)
            self.cur.execute(
                f"SELECT {cols} FROM incidents WHERE state = {p} AND device_id = {p} AND kind = {p}"
                f" AND last_seen_ns >= {p}",
                (INCIDENT_OPEN, device_id, kind, lo - max(self.window, XID_MERGE_WINDOW_NS)),
            )
            for rec in self.cur.fetchall():
                found[int(rec[0])] = rec
            if kind == KIND_GPU_XID:  # incidents_kind_ts (kind, ts_ns)
                self.cur.execute(
                    f"SELECT {cols} FROM incidents WHERE kind = {p} AND ts_ns BETWEEN {p} AND {p} AND device_id = {p}",
                    (kind, lo - XID_MERGE_WINDOW_NS, hi + XID_MERGE_WINDOW_NS, device_id),
                )
                for rec in self.cur.fetchall():
                    found[int(rec[0])] = rec
            self.known[(device_id, kind)] = [self._stored(rec) for _, rec in sorted(found.items())]

    def _stored(self, rec: tuple) -> _Incident:
        row = dict(zip(_INSERT_COLUMNS, rec[1:]))
        for c in _INSERT_JSON_COLUMNS:
            row[c] = _json(row[c])
        row["facts"] = dict(row["facts"] or {})
        row["context"] = dict(row["context"] or {})
        row["hints"] = row["hints"] or []
        row["count"] = int(row["count"] or 1)
        inc = _Incident(row=row, id=int(rec[0]))
        if row["kind"] == KIND_GPU_XID:
            if _PENDING in row["context"]:
                inc.pending = [r for r in map(_Report.from_json, row["context"][_PENDING] or []) if r is not None]
            else:  # one report per row (before grouping, or a scan import)
                r = _report(row)
                if r is not None and row["count"] == 1:
                    r.first = True
                    inc.pending = [r]
            for r in inc.pending:
                if r.reporter == SOURCE_NVML and r.bus is None and r.first:
                    r.bus = self.inventories.bus_of(int(row["device_id"]), row["facts"])
        return inc

    # -- one row

    def _add(self, row: dict) -> None:
        device_id = int(row["device_id"])
        candidates = self.known.setdefault((device_id, row["kind"]), [])
        report = _report(row)
        if report is not None:
            if report.reporter == SOURCE_NVML and report.bus is None:
                report.bus = self.inventories.bus_of(device_id, row["facts"])
            match = self._match(report, candidates)
            if match is not None:
                self._fold(match[0], match[1], report, row)
                self.merged += 1
                return
        if row["origin"] == ORIGIN_AGENT and row["state"] == INCIDENT_OPEN and row["kind"] not in RECORD_KINDS:
            into = self._open_group(row, candidates)
            if into is not None:
                self._absorb(into, row, report)
                self.grouped += 1
                return
        inc = _Incident(row=row)
        if report is not None:
            report.first = True
            inc.pending = [report]
        candidates.append(inc)
        self.new.append(inc)

    def _match(self, report: _Report, candidates: list[_Incident]) -> tuple[_Incident, _Report] | None:
        """The earliest unpaired report of the other reporter of the same fault: a burst then
        pairs in order, the first line with the first event, and so on."""
        best: tuple[tuple[int, int, int], _Incident, _Report] | None = None
        for order, inc in enumerate(candidates):
            for other in inc.pending:
                if not _same_fault(report, other):
                    continue
                rank = (other.ts_ns, 0 if inc.id is not None else 1, inc.id if inc.id is not None else order)
                if best is None or rank < best[0]:
                    best = (rank, inc, other)
        return (best[1], best[2]) if best else None

    def _open_group(self, row: dict, candidates: list[_Incident]) -> _Incident | None:
        """The open incident ``row`` repeats, if any: same GPU and group key, within the window."""
        ts = row["ts_ns"]
        fits = [
            inc
            for inc in candidates
            if inc.groupable
            and _same_gpu(inc.row, row)
            and inc.row["group_key"] == row["group_key"]
            and ts - inc.row["last_seen_ns"] <= self.window
            and ts >= inc.row["ts_ns"] - self.window
        ]
        return max(fits, key=lambda i: i.row["last_seen_ns"]) if fits else None

    def _absorb(self, inc: _Incident, row: dict, report: _Report | None) -> None:
        """``row`` is one more occurrence of ``inc``."""
        r = inc.row
        r["count"] += 1
        ts = row["ts_ns"]
        if ts >= r["last_seen_ns"]:
            r["last_seen_ns"] = ts
            r["facts"]["last"] = _last(row)
        if ts < r["ts_ns"]:
            r["ts_ns"] = ts
        r["severity"] = _worse(r["severity"], row["severity"])
        r["updated_ns"] = max(r["updated_ns"] or 0, row["received_ns"])
        _fill_process(r, row)
        if report is not None:
            report.first = False
            inc.pending.append(report)
        inc.changed = True

    def _fold(self, inc: _Incident, other: _Report, report: _Report, row: dict) -> None:
        """``row`` (``report``) is the other reporter's report of ``inc``'s occurrence ``other``."""
        inc.pending.remove(other)
        r = inc.row
        log_first = report.reporter == SOURCE_KERNEL_LOG
        if other.first:
            mine = {**r, "ts_ns": other.ts_ns}  # the first occurrence as its reporter stamped it
            log, nvml = (row, mine) if log_first else (mine, row)
            facts = _merged_facts(log, nvml, self.inventories.index_of(int(r["device_id"]), _log_bus(report, other)))
            # The line's severity, title and source win; a grouped incident keeps the worst severity.
            severity = log["severity"] if r["count"] == 1 else _worse(r["severity"], log["severity"])
            r.update(
                ts_ns=min(row["ts_ns"], r["ts_ns"]),
                received_ns=min(row["received_ns"], r["received_ns"]),
                severity=severity,
                title=log["title"],
                facts=facts,
                source=log["source"],
                excerpt="\n".join(e for e in (log["excerpt"], nvml["excerpt"]) if e),
            )
            if r["count"] == 1:
                r["last_seen_ns"] = r["ts_ns"]
        else:
            last = r["facts"].get("last")
            if isinstance(last, dict) and last.get("ts_ns") == other.ts_ns:
                here = {"ts_ns": row["ts_ns"], "title": row["title"], "facts": row["facts"]}
                there = {"ts_ns": last["ts_ns"], "title": last.get("title", ""),
                         "facts": {k: v for k, v in last.items() if k not in ("ts_ns", "title")}}  # fmt: skip
                log, nvml = (here, there) if log_first else (there, here)
                merged = _merged_facts(log, nvml, None)
                at = min(here["ts_ns"], there["ts_ns"])  # the occurrence's time is the earlier report's
                r["facts"]["last"] = {**merged, "ts_ns": at, "title": log["title"]}
                if r["last_seen_ns"] == last["ts_ns"]:
                    r["last_seen_ns"] = max(at, r["ts_ns"])
            r["severity"] = _worse(r["severity"], row["severity"])
        if r["gpu_index"] is None:
            r["gpu_index"] = _int(r["facts"].get("gpu_index"))
        _fill_process(r, row)
        r["updated_ns"] = max(r["updated_ns"] or 0, row["received_ns"])
        inc.changed = True

    # -- rows out

    def _final(self, inc: _Incident) -> dict:
        """The incident's row as written, with its unpaired Xid reports (pruned)."""
        row = inc.row
        if row["kind"] == KIND_GPU_XID:
            newest = max([row["last_seen_ns"], *(p.ts_ns for p in inc.pending)])
            keep = [p for p in inc.pending if p.ts_ns >= newest - _PENDING_KEEP_NS][-_PENDING_MAX:]
            row["context"] = {**row["context"], _PENDING: [p.to_json() for p in keep]}
        return row

    def _insert(self, rows: list[dict]) -> None:
        p = self.p
        json_p = p if self.sqlite else "CAST(%s AS JSON)"
        placeholders = ", ".join(json_p if c in _INSERT_JSON_COLUMNS else p for c in _INSERT_COLUMNS)
        params = [tuple(json.dumps(r[c]) if c in _INSERT_JSON_COLUMNS else r[c] for c in _INSERT_COLUMNS) for r in rows]
        self.cur.executemany(f"INSERT INTO incidents ({', '.join(_INSERT_COLUMNS)}) VALUES ({placeholders})", params)

    def _update(self, incident_id: int, row: dict) -> None:
        p = self.p
        json_p = p if self.sqlite else "CAST(%s AS JSON)"
        sets = ", ".join(f"{c} = {json_p if c in _JSON_COLUMNS else p}" for c in _UPDATE_COLUMNS)
        params = [json.dumps(row[c]) if c in _JSON_COLUMNS else row[c] for c in _UPDATE_COLUMNS]
        self.cur.execute(f"UPDATE incidents SET {sets} WHERE id = {p}", (*params, incident_id))


def _bus_of_row(row: dict) -> tuple[int, int, int] | None:
    facts = row["facts"]
    return pci_bus_key(facts.get("pci_bus_id")) or pci_bus_key(facts.get("pci_address"))


def _same_gpu(a: dict, b: dict) -> bool:
    """Whether two rows are about the same GPU: by index, or for an Xid whose index is unknown
    (a kernel line on a device whose inventory does not place its bus), by PCI bus."""
    if a["gpu_index"] is not None and b["gpu_index"] is not None:
        return bool(a["gpu_index"] == b["gpu_index"])
    if a["kind"] == KIND_GPU_XID:
        bus_a, bus_b = _bus_of_row(a), _bus_of_row(b)
        if bus_a is not None and bus_b is not None:
            return bus_a == bus_b
    return bool(a["gpu_index"] is None and b["gpu_index"] is None)


def _same_fault(a: _Report, b: _Report) -> bool:
    return (
        a.reporter != b.reporter
        and a.code == b.code
        and abs(a.ts_ns - b.ts_ns) <= XID_MERGE_WINDOW_NS
        and (a.bus is None or b.bus is None or a.bus == b.bus)
    )


def _log_bus(a: _Report, b: _Report) -> tuple[int, int, int] | None:
    return a.bus if a.reporter == SOURCE_KERNEL_LOG else b.bus


def _merged_facts(log: dict, nvml: dict, log_gpu_index: int | None) -> dict:
    """The facts of one Xid reported by the kernel line ``log`` and the NVML event ``nvml``
    (each a dict with ``ts_ns`` and ``facts``)."""
    # The line's facts win where both name one: its catalogue facts may be refined by the message.
    facts = {**(nvml["facts"] or {}), **(log["facts"] or {})}
    facts["sources"] = _BOTH_SOURCES
    facts["kernel_log_ts_ns"] = log["ts_ns"]
    facts["nvml_ts_ns"] = nvml["ts_ns"]
    if "gpu_index" not in facts and log_gpu_index is not None:
        facts["gpu_index"] = log_gpu_index
    return facts


def _last(row: dict) -> dict:
    """A later occurrence as ``facts["last"]`` keeps it: its facts, time and title."""
    return {**row["facts"], "ts_ns": row["ts_ns"], "title": row["title"]}


def _fill_process(into: dict, row: dict) -> None:
    """GPU and process facts the incident does not have yet, from a later report."""
    for c in ("gpu_index", "pid"):
        if into[c] is None and row.get(c) is not None:
            into[c] = row[c]
    if not into["process_name"] and row.get("process_name"):
        into["process_name"] = row["process_name"]
