"""Importing scanned findings as incidents of one device (``fleetscope scan --db URL --device NAME``).

Logs from before the agent was installed hold the incidents people most want to look back on.
The scanner (``fleetscope.agent.tools.scan``) finds them; this stores them in the ``incidents`` table
like incidents an agent reported, so the query API and ``fleetscope incidents`` show both.

Idempotent: every imported incident carries ``facts["import_key"]``, a hash of the file's
resolved path, the line, the kind and the finding's ordinal among findings of that kind on
that line. An import skips keys the device already has, so importing the same files twice (or
a log that grew since) adds only what is new. The check and the inserts run in one transaction
that first takes the device row's write lock, so two imports of the same files cannot
interleave. The incidents are written by ``storage.incidents.write_incidents``, like an agent's:
an imported Xid line merges with the NVML report of the same fault.

Times: the time printed in the log line when the classifier read one, else the file's
modification time (the latest any of its lines can be); ``facts["ts_source"]`` says which.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fleetscope.collector.errors import UnknownDevice
from fleetscope.collector.query import get_device
from fleetscope.collector.storage.incidents import write_incidents
from fleetscope.collector.storage.registry import lookup_device_id, register_device
from fleetscope.collector.storage.schema import Device, Incident
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import INCIDENT_RESOLVED, ORIGIN_IMPORT

IMPORTED_LABEL = "imported"
_SOURCE_CHUNK = 500  # sources per IN (...) list: well under every driver's parameter limit


@dataclass(frozen=True)
class ImportedIncident:
    """One incident to store, with the key that makes storing it twice a no-op."""

    key: str
    ts_ns: int
    kind: str
    severity: str
    title: str
    facts: dict[str, Any]
    source: str
    excerpt: str


@dataclass(frozen=True)
class ImportOutcome:
    device: str
    device_id: int
    created_device: bool
    inserted: int
    already_present: int


def import_key(source: str, line: int, kind: str, ordinal: int = 0) -> str:
    """Deterministic key of one finding: same file, line, kind and ordinal -> same key."""
    return hashlib.sha256(f"{source}\0{line}\0{kind}\0{ordinal}".encode()).hexdigest()[:32]


def _source(path: str) -> str:
    # The resolved path: `logs/a.log` scanned from two working directories is one file.
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return path


def incidents_from_scan(
    results: Iterable[Any], *, kinds: Collection[str] | None = None
) -> list[ImportedIncident]:
    """Incidents from ``fleetscope.agent.tools.scan.ScanResult`` objects (duck-typed: path, mtime_ns, findings)."""
    out: list[ImportedIncident] = []
    fallback_ns = time.time_ns()
    for r in results:
        source = _source(r.path)
        seen: dict[tuple[int, str], int] = {}
        for f in r.findings:
            ordinal = seen.get((f.line, f.kind), 0)
            seen[(f.line, f.kind)] = ordinal + 1  # per (line, kind): a --kind filter never shifts a key
            if kinds is not None and f.kind not in kinds:
                continue
            key = import_key(source, f.line, f.kind, ordinal)
            printed = f.ts_ns is not None
            ts_ns = f.ts_ns if printed else (r.mtime_ns if r.mtime_ns is not None else fallback_ns)
            facts = {
                **dict(f.facts),
                "import_key": key,
                "import_line": f.line,
                "ts_source": "log_text" if printed else "file_mtime",
            }
            out.append(
                ImportedIncident(
                    key=key,
                    ts_ns=int(ts_ns),
                    kind=f.kind,
                    severity=f.severity,
                    title=f.title,
                    facts=facts,
                    source=source,
                    excerpt=f.excerpt[:2000],
                )
            )
    return out


def _imported_agent_id(name: str) -> str:
    return "imported-" + hashlib.sha256(name.encode()).hexdigest()[:32]


def ensure_device(engine: Engine, name: str, *, now_ns: int | None = None) -> tuple[int, bool]:
    """The id of the device named ``name`` (as the query API finds it), registering it when absent.

    A device that exists is left as it is (an agent's labels and kind stay its own); a new one is
    registered through the registry, kind "other", label ``imported=true``.
    """
    found = _existing_device_id(engine, name)
    if found is not None:
        return found, False
    req = pb.RegisterRequest(
        agent_id=_imported_agent_id(name),
        name=name,
        hostname="",
        kind=pb.DEVICE_KIND_OTHER,
        agent_version="import",
    )
    req.labels[IMPORTED_LABEL] = "true"
    try:
        reg = register_device(engine, req, received_ns=now_ns if now_ns is not None else time.time_ns())
    except IntegrityError:
        # Another import registered it between our lookup and insert: use that row.
        found = _existing_device_id(engine, name)
        if found is None:
            raise
        return found, False
    return reg.device_id, True


def _existing_device_id(engine: Engine, name: str) -> int | None:
    """The id of the device the query API finds by ``name`` (its name or agent id), if any."""
    with Session(engine) as session:
        try:
            agent_id = get_device(session=session, device=name, now_ns=time.time_ns()).agent_id
        except UnknownDevice:
            return None
    return lookup_device_id(engine, agent_id)


def import_incidents(
    engine: Engine, *, device: str, incidents: Sequence[ImportedIncident], now_ns: int | None = None
) -> ImportOutcome:
    """Store ``incidents`` for ``device`` (created if missing), skipping keys it already has."""
    now_ns = now_ns if now_ns is not None else time.time_ns()
    device_id, created = ensure_device(engine, device, now_ns=now_ns)
    inserted = skipped = 0
    with Session(engine) as session, session.begin():
        # A no-op UPDATE takes the row's write lock (PostgreSQL) or the database's (SQLite) before
        # the check below, so a concurrent import of the same files waits instead of duplicating.
        session.execute(update(Device).where(Device.id == device_id).values(last_seen_ns=Device.last_seen_ns))
        existing = _existing_keys(session, device_id, sorted({i.source for i in incidents}))
        rows: list[dict[str, Any]] = []
        for inc in incidents:
            if inc.key in existing:
                skipped += 1
                continue
            existing.add(inc.key)  # the same file named twice on one command line
            rows.append(
                {
                    "device_id": device_id,
                    "ts_ns": inc.ts_ns,
                    "received_ns": now_ns,
                    "kind": inc.kind,
                    "severity": inc.severity,
                    "title": inc.title,
                    "facts": inc.facts,
                    "source": inc.source,
                    "excerpt": inc.excerpt,
                    "context": {},
                    # History from old files: never open, never alerted on.
                    "origin": ORIGIN_IMPORT,
                    "state": INCIDENT_RESOLVED,
                    "ended_ns": inc.ts_ns,
                }
            )
        if rows:
            # The one way incidents are written (an imported Xid line joins the NVML report of
            # the same fault), on this session's connection and inside its transaction.
            cur = session.connection().connection.cursor()
            try:
                write_incidents(cur, rows, engine.dialect.name == "sqlite")
            finally:
                cur.close()
            inserted = len(rows)
    return ImportOutcome(
        device=device, device_id=device_id, created_device=created, inserted=inserted, already_present=skipped
    )


def _existing_keys(session: Session, device_id: int, sources: list[str]) -> set[str]:
    keys: set[str] = set()
    for i in range(0, len(sources), _SOURCE_CHUNK):
        chunk = sources[i : i + _SOURCE_CHUNK]
        q = select(Incident.facts).where(Incident.device_id == device_id, Incident.source.in_(chunk))
        for facts in session.scalars(q):
            key = (facts or {}).get("import_key")
            if key:
                keys.add(str(key))
    return keys


def import_scan_results(
    engine: Engine,
    *,
    device: str,
    results: Iterable[Any],
    kinds: Collection[str] | None = None,
    now_ns: int | None = None,
) -> ImportOutcome:
    """``incidents_from_scan`` then ``import_incidents``: what ``fleetscope scan --db`` runs."""
    return import_incidents(
        engine, device=device, incidents=incidents_from_scan(results, kinds=kinds), now_ns=now_ns
    )
