"""The one way to write incidents: ``write_incidents``, inside the caller's transaction.

Incidents reach the database two ways, and both come here: the ingest writer
(``storage.writer``) writes each group's incidents in the group's transaction, and a scan import
(``ingest.scan_import``) writes the findings of old log files in its own. Both hand over rows as
``dict``s with the ``incidents`` table's columns (``facts`` and ``context`` as Python objects) and a
DB-API cursor of the connection their transaction runs on.

Xid once
--------
On a server two reporters see the same Xid, and both are on by default: NVML's event thread
(incidents with ``source`` "nvml", facts ``gpu_index``, ``gpu_uuid``, ``pci_bus_id``) and the
driver's kernel-log line read by the Xid classifier (``source`` "kmsg", "journal:kernel" or a
file; facts ``pci_address``, ``pid``, ``process_name``, the message). Without a merge one GPU
fault would be two incidents. Here a report of one is folded into the matching report of the
other: ONE incident, whose ``sources`` fact names both ("kernel_log,nvml") and which keeps both
reports' facts and excerpts, each reporter's own time (``kernel_log_ts_ns``, ``nvml_ts_ns``), and
the earlier of the two as its time. The kernel line's severity, title and ``source`` win: the
printed message can refine what the catalogue says about the code (NVLink Fatal/Nonfatal, Xid
154's recovery action), the title names the process, and ``source`` stays where the line can be
read again.

Why the collector merges, and why here:

* The two reports travel separately: NVML's from the sampler on every tick, the kernel line from
  the log pipeline after grouping, each batched by whichever flush comes next (a different batch,
  often a different transaction). An agent that merged would have to hold every Xid back for the
  whole window, across flushes and restarts, and a scan import could never join in.
* In the writer's transaction the merge is exactly-once and atomic: a replayed batch is skipped
  before its incidents get here, and a group that rolls back takes its merges with it. It works
  whether both reports are in one batch, in one group of batches, or an earlier transaction
  stored the other, in either order.
* Incidents are rare (a handful a day per device, a burst of tens at worst): one indexed lookup
  per Xid report costs nothing next to ingest's ~200k sample rows/s, which never pass through
  this module.

Matching: same device, kind ``gpu_xid``, same Xid code (``xid``; a fallen-off-the-bus notice's
``implied_xid``), one report from each reporter, neither merged already, timestamps at most
``XID_MERGE_WINDOW_NS`` apart, and the same GPU. A report pairs with at most one other, the
earliest still unpaired, so a burst of sixteen Xid 13 lines and sixteen NVML events stays
sixteen incidents, paired in order.

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
so two transactions cannot both find "no match" for the same device and both insert.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetscope.proto.vocabulary import (
    INCIDENT_OPEN,
    KIND_GPU_XID,
    ORIGIN_AGENT,
    SOURCE_KERNEL_LOG,
    SOURCE_NVML,
)

__all__ = ["XID_MERGE_WINDOW_NS", "IncidentsWritten", "pci_bus_key", "write_incidents"]

# The driver prints the Xid line and posts the NVML event from the same error handler,
# microseconds apart. What separates the two reports' timestamps is how each was read: the NVML
# thread stamps an event when its wait returns (within xid_poll_ms), a log line gets the time of
# the agent tick that read it (one sampling interval, plus a followed kern.log's syslog
# buffering), and a batch shifted onto the collector's clock may move by the skew's jitter.
# Ten seconds covers all of that with room; two distinct faults of one code on one GPU closer
# than that still pair one to one, never into a single incident.
XID_MERGE_WINDOW_NS = 10 * 10**9

_COLUMNS = ("device_id", "ts_ns", "received_ns", "kind", "severity", "title", "facts", "source", "excerpt", "context")
_JSON_COLUMNS = ("facts", "context")
_BOTH_SOURCES = ",".join(sorted((SOURCE_KERNEL_LOG, SOURCE_NVML)))  # "kernel_log,nvml"

# "0000:3b:00" (kernel line), "00000000:3B:00.0" (NVML), "0000:3B:00.0" (legacy bus id), "3b:00".
_PCI = re.compile(r"^\s*(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.[0-7])?\s*$")


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


def write_incidents(cur, incidents: Sequence[dict], sqlite: bool) -> IncidentsWritten:  # type: ignore[no-untyped-def]
    """Store ``incidents`` (rows of the ``incidents`` table) with the caller's cursor, inside the
    caller's transaction, merging each Xid reported by both NVML and the kernel log into one
    incident (see the module docstring). The input dicts are not changed."""
    rows: list[dict | None] = list(incidents)
    merged = 0
    reports = [(i, r) for i, r in ((i, _report(inc)) for i, inc in enumerate(incidents)) if r is not None]
    if reports:
        merged = _merge_xid_reports(cur, rows, reports, sqlite)
    fresh = [r for r in rows if r is not None]
    if fresh:
        _insert(cur, fresh, sqlite)
    return IncidentsWritten(inserted=len(fresh), merged=merged)


# ------------------------------------------------------------------------------ plain writes


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


def _insert_values(r: dict) -> tuple:
    full = {**_LIFECYCLE_DEFAULTS, "last_seen_ns": r["ts_ns"], "updated_ns": r["received_ns"], **r}
    return tuple(json.dumps(full[c]) if c in _INSERT_JSON_COLUMNS else full[c] for c in _INSERT_COLUMNS)


def _insert(cur, rows: list[dict], sqlite: bool) -> None:  # type: ignore[no-untyped-def]
    p = "?" if sqlite else "%s"
    json_p = p if sqlite else "CAST(%s AS JSON)"
    placeholders = ", ".join(json_p if c in _INSERT_JSON_COLUMNS else p for c in _INSERT_COLUMNS)
    params = [_insert_values(r) for r in rows]
    cur.executemany(f"INSERT INTO incidents ({', '.join(_INSERT_COLUMNS)}) VALUES ({placeholders})", params)


def _update(cur, incident_id: int, row: dict, sqlite: bool) -> None:  # type: ignore[no-untyped-def]
    p = "?" if sqlite else "%s"
    json_p = p if sqlite else "CAST(%s AS JSON)"
    cur.execute(
        f"UPDATE incidents SET ts_ns = {p}, received_ns = {p}, severity = {p}, title = {p}, facts = {json_p},"
        f" source = {p}, excerpt = {p} WHERE id = {p}",
        (row["ts_ns"], row["received_ns"], row["severity"], row["title"], json.dumps(row["facts"]), row["source"],
         row["excerpt"], incident_id),
    )


def _json(value: Any) -> Any:
    # SQLite hands JSON columns back as text; psycopg has already parsed them.
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# ---------------------------------------------------------------------------------- Xid once


@dataclass
class _Report:
    """One report of an Xid by one reporter, written or about to be."""

    reporter: str  # SOURCE_NVML or SOURCE_KERNEL_LOG
    code: int
    row: dict
    stored_id: int | None = None  # the incident's id when an earlier transaction stored it
    bus: tuple[int, int, int] | None = field(default=None)

    @property
    def device_id(self) -> int:
        return int(self.row["device_id"])

    @property
    def ts_ns(self) -> int:
        return int(self.row["ts_ns"])


def _report(row: dict) -> _Report | None:
    """``row`` as one reporter's report of an Xid, or None when it is not one that can merge."""
    if row["kind"] != KIND_GPU_XID:
        return None
    facts = row["facts"] or {}
    if "sources" in facts:  # merged already
        return None
    code = facts.get("xid", facts.get("implied_xid"))
    if not isinstance(code, int) or isinstance(code, bool):
        return None  # an SXid (NVSwitch) finding: NVML reports no such event
    if row["source"] == SOURCE_NVML:
        return _Report(SOURCE_NVML, code, row, bus=pci_bus_key(facts.get("pci_bus_id")))
    # Every other gpu_xid incident is the Xid classifier reading a driver line: from kmsg, the
    # journal, a followed file or an imported one.
    return _Report(SOURCE_KERNEL_LOG, code, row, bus=pci_bus_key(facts.get("pci_address")))


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


def _merge_xid_reports(cur, rows: list[dict | None], reports: list[tuple[int, _Report]], sqlite: bool) -> int:  # type: ignore[no-untyped-def]
    """Fold each report into its match (in ``rows`` or stored); returns how many were folded.

    Reports are taken in time order; each looks for its match among the reports already taken
    (still in ``rows``) and among stored incidents, so a pair is found whichever came first."""
    inventories = _Inventories(cur, sqlite)
    for _, r in reports:
        if r.reporter == SOURCE_NVML and r.bus is None:
            r.bus = inventories.bus_of(r.device_id, r.row["facts"])
    taken: list[tuple[int, _Report]] = []  # (position in rows, report) of reports still unpaired
    folded = 0
    for pos, report in sorted(reports, key=lambda pr: (pr[1].ts_ns, pr[0])):
        in_call = [(p, t) for p, t in taken if _same_fault(report, t)]
        stored = [s for s in _stored_reports(cur, report, sqlite, inventories) if _same_fault(report, s)]
        # The earliest unpaired report of the other reporter: a burst then pairs in order, the
        # first line with the first event, and so on.
        best = min(
            [(s.ts_ns, 0, s.stored_id or 0, -1, s) for s in stored]
            + [(t.ts_ns, 1, 0, p, t) for p, t in in_call],
            key=lambda c: c[:4],
            default=None,
        )
        if best is None:
            taken.append((pos, report))
            continue
        other_pos, other = best[3], best[4]
        merged = _merged_row(report, other, inventories)
        rows[pos] = None
        folded += 1
        if other.stored_id is not None:
            _update(cur, other.stored_id, merged, sqlite)
        else:
            rows[other_pos] = merged  # written where the report taken first stood
            taken.remove((other_pos, other))
    return folded


def _same_fault(a: _Report, b: _Report) -> bool:
    return (
        a.reporter != b.reporter
        and a.code == b.code
        and a.device_id == b.device_id
        and abs(a.ts_ns - b.ts_ns) <= XID_MERGE_WINDOW_NS
        and (a.bus is None or b.bus is None or a.bus == b.bus)
    )


def _stored_reports(cur, report: _Report, sqlite: bool, inventories: _Inventories) -> list[_Report]:  # type: ignore[no-untyped-def]
    """This device's stored gpu_xid incidents within the window of ``report``, as reports
    (merged ones, and SXids, are left out). Served by the (kind, ts_ns) index."""
    p = "?" if sqlite else "%s"
    cur.execute(
        "SELECT id, device_id, ts_ns, received_ns, kind, severity, title, facts, source, excerpt, context"
        f" FROM incidents WHERE kind = {p} AND ts_ns BETWEEN {p} AND {p} AND device_id = {p} ORDER BY id",
        (KIND_GPU_XID, report.ts_ns - XID_MERGE_WINDOW_NS, report.ts_ns + XID_MERGE_WINDOW_NS, report.device_id),
    )
    out = []
    for rec in cur.fetchall():
        row = dict(zip(("id", *_COLUMNS), rec))
        incident_id = row.pop("id")
        row["facts"] = _json(row["facts"]) or {}
        row["context"] = _json(row["context"]) or {}
        r = _report(row)
        if r is None:
            continue
        r.stored_id = incident_id
        if r.reporter == SOURCE_NVML and r.bus is None:
            r.bus = inventories.bus_of(r.device_id, r.row["facts"])
        out.append(r)
    return out


def _merged_row(a: _Report, b: _Report, inventories: _Inventories) -> dict:
    """One incident for the kernel line ``log`` and the NVML event ``nvml`` of one Xid."""
    log, nvml = (a, b) if a.reporter == SOURCE_KERNEL_LOG else (b, a)
    lrow, nrow = log.row, nvml.row
    # The line's facts win where both name one: its catalogue facts may be refined by the message.
    facts = {**(nrow["facts"] or {}), **(lrow["facts"] or {})}
    facts["sources"] = _BOTH_SOURCES
    facts["kernel_log_ts_ns"] = lrow["ts_ns"]
    facts["nvml_ts_ns"] = nrow["ts_ns"]
    if "gpu_index" not in facts:
        index = inventories.index_of(log.device_id, log.bus)
        if index is not None:
            facts["gpu_index"] = index
    return {
        "device_id": log.device_id,
        "ts_ns": min(lrow["ts_ns"], nrow["ts_ns"]),
        "received_ns": min(lrow["received_ns"], nrow["received_ns"]),
        "kind": KIND_GPU_XID,
        "severity": lrow["severity"],
        "title": lrow["title"],
        "facts": facts,
        "source": lrow["source"],
        "excerpt": "\n".join(e for e in (lrow["excerpt"], nrow["excerpt"]) if e),
        "context": lrow.get("context") or nrow.get("context") or {},
    }
