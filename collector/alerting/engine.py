"""The alert job: evaluates the rules every pass and moves alerts pending -> firing -> resolved.

Design, and why:

* **Prometheus' states.** Each pass computes, per rule, the subjects for which its condition
  holds now: one open incident (incident and SLO rules: one alert per incident), a device's GPU
  or host whose newest sample is past the threshold (metric rules), a device silent for longer
  than allowed (absence rules). A subject seen for the first time gets an alert row, ``pending``;
  it fires once the condition has held for the rule's ``for`` (at once when ``for`` is 0); when
  the condition no longer holds a firing alert is ``resolved`` and a pending one is dropped
  (resolved without ever firing). Resolved rows stay as the history. The alert is identified by
  its ``fingerprint``, a stable hash of the rule and the subject.
* **Exactly once, any number of collectors.** Each pass takes the ``alerts`` lease and is ONE
  transaction that renews it first (``Lease.renew_in``): the alert rows, their transitions and
  the ``notifications`` each transition owes (one per notifier) commit together or not at all, a
  collector that stalled past its lease has its pass rolled back, and the unique key on
  (alert, transition, notifier) refuses a second notification for one transition whatever
  happens.
* **Silences** are looked at on each transition: one that matches (rule, device, labels) and has
  not expired records its id in ``silenced_by`` and no notification is created; the state still
  changes, so the history is whole.
* **Delivery is elsewhere** (``notifiers.Sender``, on its own threads): a slow receiver never
  holds up evaluation. The job wakes the sender when a pass created notifications.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.orm import Session

from fleetscope.collector.alerting.rules import Rule, Rules, RuleSet, rules_source
from fleetscope.collector.query.alerts import SilenceRow, list_silences, silence_matches
from fleetscope.collector.query.devices import batch_interval_s
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.lease import Lease, LeaseLost, default_owner
from fleetscope.collector.storage.schema import (
    Device,
    Incident,
    alerts,
    gpu_latest,
    host_latest,
    metric_points,
    notifications,
)
from fleetscope.collector.storage.write_lock import WriteLock
from fleetscope.proto.vocabulary import (
    ALERT_FIRING,
    ALERT_PENDING,
    ALERT_RESOLVED,
    INCIDENT_OPEN,
    KIND_LATENCY_SLO,
    ORIGIN_IMPORT,
    SEVERITY_RANK,
    SEVERITY_WARNING,
    format_reading,
)

__all__ = ["LEASE_NAME", "AlertJob", "EvalReport", "Subject", "fingerprint", "notification_payload"]

log = logging.getLogger(__name__)

LEASE_NAME = "alerts"
NS = 10**9
PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class Subject:
    """What one alert is about, as the pass found it."""

    key: str  # the subject's identity within its rule ("incident:12", "gpu:3:0", "device:3")
    device_id: int | None
    device_name: str | None
    kind: str
    severity: str
    summary: str
    labels: dict[str, str]
    facts: dict[str, Any]
    incident_id: int | None = None


@dataclass
class EvalReport:
    """What one pass did."""

    ran: bool
    holder: str
    rules: int = 0
    active: int = 0
    pending: int = 0  # new pending alerts
    fired: int = 0
    resolved: int = 0
    dropped: int = 0  # pending alerts whose condition cleared before they fired
    notifications: int = 0
    silenced: int = 0  # transitions a silence held back
    seconds: float = 0.0
    transitions: list[tuple[str, str, str]] = field(default_factory=list)  # (rule, subject key, new state)


def fingerprint(rule: str, key: str) -> str:
    """A stable hash of the rule's name and the subject's key (64 hex digits)."""
    return hashlib.sha256(f"{rule}\x00{key}".encode()).hexdigest()


def _iso(ts_ns: int | None) -> str | None:
    if ts_ns is None:
        return None
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dashboard_link(base: str | None, *, rule: str, device: str | None) -> str | None:
    """The dashboard's Alerts page for this rule and device, when a dashboard URL is set."""
    if not base:
        return None
    params = {"rule": rule, **({"device": device} if device else {})}
    return f"{base.rstrip('/')}/alerts?{urlencode(params)}"


def notification_payload(alert: Mapping[str, Any], transition: str, *, device_name: str | None,
                         dashboard_url: str | None) -> dict[str, Any]:
    """The JSON document a webhook receives (Slack and Alertmanager bodies are made from it)."""
    started = alert["firing_ns"] if alert.get("firing_ns") is not None else alert["pending_ns"]
    ended = alert.get("resolved_ns") if transition == ALERT_RESOLVED else None
    return {
        "version": PAYLOAD_VERSION,
        "rule": alert["rule"],
        "state": transition,
        "alert_id": alert["id"],
        "fingerprint": alert["fingerprint"],
        "device": device_name,
        "labels": dict(alert["labels"]),
        "kind": alert["kind"],
        "severity": alert["severity"],
        "summary": alert["summary"],
        "facts": dict(alert["facts"]),
        "incident_id": alert.get("incident_id"),
        "started_ns": started,
        "started": _iso(started),
        "ended_ns": ended,
        "ended": _iso(ended),
        "dashboard_url": dashboard_link(dashboard_url, rule=alert["rule"], device=device_name),
    }


def _labels_of(device: Mapping[str, Any] | None) -> dict[str, str]:
    raw = (device or {}).get("labels") or {}
    return {str(k): str(v) for k, v in raw.items()}


def _gpu_key(device_id: int, gpu_index: int) -> tuple[str, dict[str, str]]:
    return f"gpu:{device_id}:{gpu_index}", {"gpu": str(gpu_index)}


def _latest_values(
    conn: Connection, family: str, name: str, ids: list[int], since: int
) -> Iterable[tuple[int, str, int, float | None, dict[str, str]]]:
    """(device, subject key, time, value or None, labels) of the devices' latest rows (``gpu_latest``
    per GPU, ``host_latest``) from ``since`` on."""
    if family == "gpu":
        g = gpu_latest.c
        q = select(g.device_id, g.ts_ns, g[name], g.gpu_index).where(
            in_ids(g.device_id, ids), g.ts_ns >= since
        )
        for r in conn.execute(q):
            key, extra = _gpu_key(int(r[0]), int(r[3]))
            yield int(r[0]), key, int(r[1]), r[2], extra
    else:
        h = host_latest.c
        hq = select(h.device_id, h.ts_ns, h[name]).where(in_ids(h.device_id, ids), h.ts_ns >= since)
        for hr in conn.execute(hq):
            yield int(hr[0]), f"host:{hr[0]}", int(hr[1]), hr[2], {}


def _sampled_values(
    conn: Connection, family: str, name: str, ids: list[int], lo: int, hi: int
) -> Iterable[tuple[int, str, int, float, dict[str, str]]]:
    """(device, subject key, time, value, labels) of the devices' samples in [lo, hi) that have a
    value, wherever they are stored (tail and chunks), oldest first."""
    rows = read_samples(conn, family, ids, lo, hi, columns=(name,))
    for i in range(len(rows)):
        value = rows.value(name, i)
        if value is None:
            continue
        device_id = int(rows.device_id[i])
        if family == "gpu":
            key, extra = _gpu_key(device_id, int(rows.gpu_index[i]))
        else:
            key, extra = f"host:{device_id}", {}
        yield device_id, key, int(rows.ts_ns[i]), value, extra


class AlertJob:
    """Evaluates the rules on a thread (``start``/``stop``) or on demand (``run_once``).

    ``rules`` is a ``RuleSet`` (reloaded on each pass when its file changed) or fixed ``Rules``.
    ``on_notify`` is called after a pass committed notifications (the sender's wake-up).
    """

    def __init__(
        self,
        engine: Engine,
        rules: RuleSet | Rules | Callable[[], Rules],
        *,
        owner: str | None = None,
        interval_s: float = 1.0,
        wake_s: float = 0.1,
        lease_s: float = 30.0,
        dashboard_url: str | None = None,
        on_notify: Callable[[], None] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self._rules: Callable[[], Rules] = rules_source(rules)
        self.owner = owner or default_owner()
        self.lease = Lease(engine, LEASE_NAME, self.owner, ttl_s=lease_s, clock=clock)
        self.interval_s = interval_s
        self.wake_s = wake_s
        self.dashboard_url = dashboard_url
        self.on_notify = on_notify
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = WriteLock(engine)
        self.last_report: EvalReport | None = None

    def rules(self) -> Rules:
        return self._rules()

    # -- one pass -----------------------------------------------------------------------------

    def run_once(self, now_ns: int | None = None) -> EvalReport:
        started = time.monotonic()
        now_ns = self._clock() if now_ns is None else now_ns
        rules = self._rules()
        if not self.lease.acquire(now_ns):
            return EvalReport(ran=False, holder=self.lease.holder(now_ns) or "?")
        report = EvalReport(ran=True, holder=self.owner, rules=len(rules.rules))
        try:
            with self._write_lock, self.engine.begin() as conn:
                # First, so that on PostgreSQL the lease row is locked for this whole pass.
                self.lease.renew_in(conn, now_ns)
                self._evaluate(conn, rules, now_ns, report)
        except LeaseLost:
            log.info("alerts lease lost; this pass is rolled back")
            return EvalReport(ran=False, holder=self.lease.holder(now_ns) or "?")
        report.seconds = time.monotonic() - started
        self.last_report = report
        if report.notifications and self.on_notify is not None:
            self.on_notify()
        return report

    def _evaluate(self, conn: Connection, rules: Rules, now_ns: int, report: EvalReport) -> None:
        devices = {
            r.id: {"name": r.name, "labels": r.labels or {}, "last_seen_ns": r.last_seen_ns,
                   "batch_interval_s": batch_interval_s(r.inventory) or 0.0}
            for r in conn.execute(select(Device.id, Device.name, Device.labels, Device.last_seen_ns, Device.inventory))
        }
        open_alerts: dict[tuple[str, str], dict[str, Any]] = {}
        for row in conn.execute(select(alerts).where(alerts.c.state.in_([ALERT_PENDING, ALERT_FIRING]))):
            a = dict(row._mapping)
            open_alerts[(a["rule"], a["fingerprint"])] = a
        silences = list_silences(session=Session(bind=conn), active_at_ns=now_ns)
        incidents = self._open_incidents(conn, rules)
        seen_ids: list[int] = []
        for rule in rules.rules:
            subjects = self._subjects(conn, rule, rules, devices, incidents, now_ns)
            report.active += len(subjects)
            current = {fingerprint(rule.name, s.key): s for s in subjects}
            for fp, subject in current.items():
                existing = open_alerts.pop((rule.name, fp), None)
                if existing is None:
                    self._open(conn, rule, fp, subject, now_ns, silences, rules, report)
                else:
                    seen_ids.append(existing["id"])
                    if existing["state"] == ALERT_PENDING and now_ns - existing["pending_ns"] >= rule.for_s * NS:
                        values = {"state": ALERT_FIRING, "firing_ns": now_ns, "summary": subject.summary,
                                  "facts": subject.facts, "severity": subject.severity}
                        self._transition(conn, rule, {**existing, **values}, ALERT_FIRING, now_ns, silences, rules, report)
            for (name, fp), existing in list(open_alerts.items()):
                if name != rule.name:
                    continue
                del open_alerts[(name, fp)]
                self._close(conn, rule, existing, now_ns, silences, rules, report)
        # Alerts of rules no longer in the file: resolved quietly (nobody asked for them now).
        for existing in open_alerts.values():
            conn.execute(update(alerts).where(alerts.c.id == existing["id"]).values(
                state=ALERT_RESOLVED, resolved_ns=now_ns, last_eval_ns=now_ns,
                facts={**(existing["facts"] or {}), "resolved_because": "rule removed from the rules file"}))
            report.resolved += 1
        if seen_ids:
            for i in range(0, len(seen_ids), 500):
                conn.execute(update(alerts).where(alerts.c.id.in_(seen_ids[i : i + 500])).values(last_eval_ns=now_ns))

    # -- transitions --------------------------------------------------------------------------

    def _open(self, conn: Connection, rule: Rule, fp: str, s: Subject, now_ns: int, silences: list[SilenceRow],
              rules: Rules, report: EvalReport) -> None:
        fires = rule.for_s <= 0
        values = {
            "rule": rule.name, "fingerprint": fp, "state": ALERT_FIRING if fires else ALERT_PENDING,
            "device_id": s.device_id, "incident_id": s.incident_id, "kind": s.kind, "severity": s.severity,
            "summary": s.summary, "labels": s.labels, "facts": s.facts, "pending_ns": now_ns,
            "firing_ns": now_ns if fires else None, "resolved_ns": None, "last_eval_ns": now_ns, "silenced_by": None,
        }
        alert_id = conn.execute(insert(alerts).values(**values).returning(alerts.c.id)).scalar_one()
        alert = {**values, "id": alert_id, "_device_name": s.device_name}
        if not fires:
            report.pending += 1
            report.transitions.append((rule.name, fp, ALERT_PENDING))
        else:
            self._transition(conn, rule, alert, ALERT_FIRING, now_ns, silences, rules, report, inserted=True)

    def _close(self, conn: Connection, rule: Rule, existing: dict[str, Any], now_ns: int, silences: list[SilenceRow],
               rules: Rules, report: EvalReport) -> None:
        if existing["state"] == ALERT_PENDING:
            conn.execute(update(alerts).where(alerts.c.id == existing["id"]).values(
                state=ALERT_RESOLVED, resolved_ns=now_ns, last_eval_ns=now_ns))
            report.dropped += 1
            report.transitions.append((rule.name, existing["fingerprint"], "dropped"))
            return
        self._transition(conn, rule, {**existing, "state": ALERT_RESOLVED, "resolved_ns": now_ns},
                         ALERT_RESOLVED, now_ns, silences, rules, report)

    def _transition(self, conn: Connection, rule: Rule, alert: dict[str, Any], transition: str, now_ns: int,
                    silences: list[SilenceRow], rules: Rules, report: EvalReport, *, inserted: bool = False) -> None:
        device_name = alert.get("_device_name")
        if device_name is None and alert.get("device_id") is not None:
            device_name = conn.execute(select(Device.name).where(Device.id == alert["device_id"])).scalar()
        labels = {str(k): str(v) for k, v in (alert.get("labels") or {}).items()}
        silence = next((s for s in silences
                        if silence_matches(s, rule=rule.name, device=device_name, labels=labels, at_ns=now_ns)), None)
        silenced_by = silence.id if silence is not None else None
        if not inserted or silenced_by is not None:
            values = {k: alert[k] for k in ("state", "firing_ns", "resolved_ns", "summary", "facts", "severity")}
            conn.execute(update(alerts).where(alerts.c.id == alert["id"]).values(
                **values, last_eval_ns=now_ns, silenced_by=silenced_by))
        if transition == ALERT_FIRING:
            report.fired += 1
        else:
            report.resolved += 1
        report.transitions.append((rule.name, alert["fingerprint"], transition))
        if silenced_by is not None:
            report.silenced += 1
            return
        if not rule.notify:
            return
        payload = notification_payload(alert, transition, device_name=device_name,
                                       dashboard_url=self.dashboard_url or rules.dashboard_url)
        conn.execute(insert(notifications), [
            {"alert_id": alert["id"], "transition": transition, "notifier": name, "payload": payload,
             "state": "pending", "attempts": 0, "created_ns": now_ns, "next_attempt_ns": now_ns,
             "delivered_ns": None, "last_error": ""}
            for name in rule.notify
        ])
        report.notifications += len(rule.notify)

    # -- conditions ---------------------------------------------------------------------------

    @staticmethod
    def _open_incidents(conn: Connection, rules: Rules) -> list[dict[str, Any]]:
        kinds: set[str] = set()
        for r in rules.rules:
            kinds.update(r.incidents)
            if r.kind == "slo":
                kinds.add(KIND_LATENCY_SLO)
        if not kinds:
            return []
        i = Incident
        rows = conn.execute(
            select(i.id, i.device_id, i.kind, i.severity, i.title, i.facts, i.ts_ns, i.last_seen_ns, i.count,
                   i.gpu_index, i.pid, i.process_name, i.group_key)
            .where(i.state == INCIDENT_OPEN, i.origin != ORIGIN_IMPORT, i.kind.in_(sorted(kinds)))
            .order_by(i.id)
        )
        return [dict(r._mapping) for r in rows]

    def _subjects(self, conn: Connection, rule: Rule, rules: Rules, devices: Mapping[int, Mapping[str, Any]],
                  incidents: list[dict[str, Any]], now_ns: int) -> list[Subject]:
        selected = {d: dev for d, dev in devices.items() if rule.selects(dev["name"], _labels_of(dev))}
        if rule.kind == "incident":
            floor = SEVERITY_RANK.get(rule.severity, -1) if rule.severity else -1
            return [self._incident_subject(rule, inc, selected[inc["device_id"]], inc["kind"])
                    for inc in incidents
                    if inc["kind"] in rule.incidents and inc["device_id"] in selected
                    and SEVERITY_RANK.get(inc["severity"], -1) >= floor]
        if rule.kind == "slo":
            operation = rules.slo_names.get(rule.slo or "", rule.slo)
            return [self._incident_subject(rule, inc, selected[inc["device_id"]], "slo")
                    for inc in incidents
                    if inc["kind"] == KIND_LATENCY_SLO and inc["device_id"] in selected
                    and operation in (inc["group_key"], (inc["facts"] or {}).get("operation"))]
        if rule.kind == "absent":
            assert rule.absent_s is not None
            out = []
            for d, dev in selected.items():
                silent_ns = now_ns - dev["last_seen_ns"]
                if silent_ns > rule.absent_s * NS:
                    out.append(Subject(
                        key=f"device:{d}", device_id=d, device_name=dev["name"], kind="absent",
                        severity=rule.severity or SEVERITY_WARNING,
                        summary=rule.summary or f"no data from {dev['name']} for {silent_ns / NS:.0f} s",
                        labels=_labels_of(dev),
                        facts={"last_seen_ns": dev["last_seen_ns"], "absent_for_s": rule.absent_s}))
            return out
        return self._metric_subjects(conn, rule, selected, now_ns)

    @staticmethod
    def _incident_subject(rule: Rule, inc: Mapping[str, Any], dev: Mapping[str, Any], kind: str) -> Subject:
        labels = _labels_of(dev)
        if inc.get("gpu_index") is not None:
            labels["gpu"] = str(inc["gpu_index"])
        facts = dict(inc["facts"] or {})
        facts.update(incident_id=inc["id"], incident_kind=inc["kind"], count=inc["count"],
                     incident_started_ns=inc["ts_ns"], last_seen_ns=inc["last_seen_ns"])
        if inc.get("process_name"):
            facts.setdefault("process_name", inc["process_name"])
        return Subject(key=f"incident:{inc['id']}", device_id=inc["device_id"], device_name=dev["name"], kind=kind,
                       severity=inc["severity"], summary=rule.summary or f"{inc['title']} on {dev['name']}",
                       labels=labels, facts=facts, incident_id=inc["id"])

    @staticmethod
    def _metric_subjects(conn: Connection, rule: Rule, selected: Mapping[int, Mapping[str, Any]],
                         now_ns: int) -> list[Subject]:
        assert rule.metric is not None
        if not selected:
            return []
        family, _, name = rule.metric.partition(".")
        # A device's readings arrive a batch at a time (60 s of them from a drone): its newest
        # may be a batch interval older than the rule's lookback without the device falling
        # silent, and the alert must not resolve between two batches.
        def since_for(device_id: int) -> int:
            return now_ns - int((rule.lookback_s + float(selected[device_id].get("batch_interval_s") or 0.0)) * NS)

        since = min(since_for(d) for d in selected)
        latest: dict[tuple[int, str], tuple[int, float, dict[str, str]]] = {}
        ids = sorted(selected)
        if family in ("gpu", "host"):
            # The newest reading of each device (and GPU) is its ``gpu_latest`` / ``host_latest``
            # row (upserted with each batch, wherever the samples themselves are stored). When
            # that row has no value for the metric (a reading the sampler missed once), the
            # newest sample within the lookback that has one counts, as it always did: those
            # few devices' samples are read (tail and chunks).
            missing: dict[int, int] = {}  # device -> its newest latest row without a value: its time
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                for device_id, key, ts, value, extra in _latest_values(conn, family, name, chunk, since):
                    if ts < since_for(device_id):
                        continue
                    if value is None:
                        missing[device_id] = max(missing.get(device_id, ts), ts)
                        continue
                    latest[(device_id, key)] = (ts, float(value), extra)
            missing_ids = sorted(missing)
            for start in range(0, len(missing_ids), 500):
                chunk = missing_ids[start : start + 500]
                lo = min(since_for(d) for d in chunk)
                hi = max(missing[d] for d in chunk) + 1
                found: dict[tuple[int, str], tuple[int, float, dict[str, str]]] = {}
                for device_id, key, ts, value, extra in _sampled_values(conn, family, name, chunk, lo, hi):
                    if ts < since_for(device_id) or (device_id, key) in latest:
                        continue
                    prev = found.get((device_id, key))
                    if prev is None or ts > prev[0]:
                        found[(device_id, key)] = (ts, value, extra)
                latest.update(found)
        else:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                m = metric_points.c
                rows = conn.execute(
                    select(m.device_id, m.ts_ns, m.value, m.labels).where(
                        m.device_id.in_(chunk), m.name == name, m.ts_ns >= since
                    )
                )
                for r in rows:
                    device_id, key, ts = r[0], f"sdk:{r[0]}:{r[3]}", r[1]
                    if ts < since_for(device_id):
                        continue
                    prev = latest.get((device_id, key))
                    if prev is None or ts > prev[0]:
                        latest[(device_id, key)] = (ts, float(r[2]), {})
        out = []
        for (device_id, key), (ts, value, extra) in latest.items():
            if rule.above is not None and not value > rule.above:
                continue
            if rule.below is not None and not value < rule.below:
                continue
            dev = selected[device_id]
            word, threshold = ("above", rule.above) if rule.above is not None else ("below", rule.below)
            assert threshold is not None  # a metric rule has exactly one of above/below (load_rules checks)
            where = f" GPU {extra['gpu']}" if "gpu" in extra else ""
            out.append(Subject(
                key=key, device_id=device_id, device_name=dev["name"], kind="metric",
                severity=rule.severity or SEVERITY_WARNING,
                summary=rule.summary or (f"{rule.metric} {format_reading(rule.metric, value)} {word} "
                                         f"{format_reading(rule.metric, threshold)} on {dev['name']}{where}"),
                labels={**_labels_of(dev), **extra},
                facts={"metric": rule.metric, "value": value, word: threshold, "sample_ns": ts}))
        return out

    # -- on a thread --------------------------------------------------------------------------

    def _newest_incident(self) -> int | None:
        """The highest incident id: one primary-key seek, so it can be asked every tenth of a second."""
        try:
            with self.engine.connect() as conn:
                newest: int | None = conn.execute(select(func.max(Incident.id))).scalar()
            return newest
        except Exception:  # the database is busy or away: the regular pass will say so
            return None

    def _loop(self) -> None:
        seen = self._newest_incident()
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # a failed pass (database busy, restarting) is retried next time
                log.warning("alert evaluation failed: %s", exc)
            # Between passes, look for a new incident every ``wake_s``: an OOM then fires within
            # a tenth of a second of being stored instead of waiting out the interval.
            deadline = time.monotonic() + self.interval_s
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self._stop.wait(min(self.wake_s, left)):
                    break
                newest = self._newest_incident()
                if newest is not None and newest != seen:
                    seen = newest
                    break

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleetscope-alerts", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.lease.release()
