"""Delivering notifications: webhook (our JSON document), Slack (incoming webhook), Alertmanager.

The alert job writes one ``notifications`` row per transition and notifier, with the webhook
document as its ``payload``; the ``Sender`` here delivers them, on threads of its own so that a
slow receiver never holds up evaluation:

* **Claimed, one sender at a time per notification.** A due notification (``pending``, its
  ``next_attempt_ns`` passed) is claimed with one conditional UPDATE that moves
  ``next_attempt_ns`` past the attempt's timeout; only the collector whose UPDATE changed the row
  sends it, so two collectors on one database never send the same one at once. A sender that
  dies mid-attempt leaves a claim that expires, and another retries.
* **Every attempt recorded** in ``notification_attempts`` (time, ok, HTTP status, error,
  duration), in the same transaction that moves the notification on: ``delivered``, or back to
  ``pending`` with the next attempt after an exponential backoff (``backoff_initial_s`` doubled
  per attempt up to ``backoff_max_s``), or ``failed`` once it has been owed for ``give_up_s``.
* **At least once, never two per transition.** The row is unique per (alert, transition,
  notifier); a collector that crashes after the receiver answered but before it recorded the
  delivery sends that one again after its claim expires (the receiver can tell by
  ``alert_id`` + ``state``).

The bodies (``request_for``): a webhook gets the document as it is; Slack an incoming-webhook
message (``text`` and ``blocks``); Alertmanager a one-alert array for ``POST /api/v2/alerts``
(``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``generatorURL``).

**Alertmanager is told again while an alert fires** (``resend_once``), as Prometheus does:
Alertmanager resolves an alert by itself at its ``endsAt``, or ``resolve_timeout`` (5 min) after
it last heard of it when it has none, so one POST at the transition is not enough. Every
``resend`` (a notifier's setting, default 1 min) the alerts still firing that were delivered to
an Alertmanager notifier are POSTed to it again, in arrays, each with ``endsAt`` =
now + ``RESEND_VALID_FOR`` x ``resend`` (Prometheus: 4 x max(resend delay, evaluation
interval)), which leaves room for missed sends and resolves them when no collector sends any
more. These re-sends are not notifications: nothing is recorded but a failure in the log.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, insert, select, update

from fleetscope.collector.alerting.rules import Notifier, Rules, RuleSet, rules_source
from fleetscope.collector.storage.schema import alerts, notification_attempts, notifications
from fleetscope.collector.storage.write_lock import WriteLock
from fleetscope.proto.vocabulary import ALERT_FIRING

__all__ = [
    "RESEND_VALID_FOR",
    "Attempt",
    "Sender",
    "alertmanager_body",
    "post_json",
    "request_for",
    "slack_body",
]

log = logging.getLogger(__name__)

NS = 10**9
USER_AGENT = "fleetscope-alerts/1"
# A firing alert sent to Alertmanager ends this many re-send intervals later unless sent again:
# room for two or three missed sends (Prometheus uses 4 x its resend delay).
RESEND_VALID_FOR = 4
RESEND_BATCH = 500  # alerts per POST when re-sending


@dataclass(frozen=True)
class Attempt:
    ok: bool
    status: int | None  # the HTTP status; None when no answer came
    error: str
    duration_ms: float


# ---------------------------------------------------------------------------------- the bodies


def slack_body(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message: a one-line ``text`` (notifications) and ``blocks``."""
    icon = ":rotating_light:" if doc["state"] == "firing" else ":white_check_mark:"
    title = f"{icon} [{doc['state'].upper()}] {doc['rule']}: {doc['summary']}"
    fields = [f"*Device:* {doc.get('device') or '-'}", f"*Severity:* {doc['severity']}", f"*Kind:* {doc['kind']}",
              f"*Started:* {doc.get('started') or '-'}"]
    if doc.get("ended"):
        fields.append(f"*Ended:* {doc['ended']}")
    facts = ", ".join(f"{k}={v}" for k, v in list(doc.get("facts", {}).items())[:12])
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": title[:3000]}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f[:2000]} for f in fields]},
    ]
    if facts:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": facts[:2000]}]})
    if doc.get("dashboard_url"):
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"<{doc['dashboard_url']}|Open in the dashboard>"}})
    return {"text": title[:3000], "blocks": blocks}


_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _iso_ns(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alertmanager_body(doc: Mapping[str, Any], *, valid_until_ns: int | None = None) -> list[dict[str, Any]]:
    """A one-alert array for Alertmanager's ``POST /api/v2/alerts``.

    A resolved alert ends when it resolved; a firing one at ``valid_until_ns`` when given (the
    time of sending plus ``RESEND_VALID_FOR`` re-send intervals), so that Alertmanager keeps it
    firing until then and no longer, whatever its ``resolve_timeout``.
    """
    labels = {"alertname": doc["rule"], "severity": doc["severity"], "kind": doc["kind"]}
    if doc.get("device"):
        labels["device"] = doc["device"]
    for k, v in doc.get("labels", {}).items():
        name = _LABEL_NAME.sub("_", str(k))
        if name and not name[0].isdigit():
            labels.setdefault(name, str(v))
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": {"summary": doc["summary"], "facts": json.dumps(doc.get("facts", {}), sort_keys=True, default=str)},
        "startsAt": doc.get("started"),
    }
    if doc["state"] == "resolved" and doc.get("ended"):
        alert["endsAt"] = doc["ended"]
    elif doc["state"] == "firing" and valid_until_ns is not None:
        alert["endsAt"] = _iso_ns(valid_until_ns)
    if doc.get("dashboard_url"):
        alert["generatorURL"] = doc["dashboard_url"]
    return [alert]


def alertmanager_url(notifier: Notifier) -> str:
    url = notifier.url.rstrip("/")
    return url if url.endswith("/api/v2/alerts") else url + "/api/v2/alerts"


def valid_until_ns(notifier: Notifier, now_ns: int) -> int:
    """Until when Alertmanager should hold a firing alert sent now to ``notifier``."""
    return now_ns + int(RESEND_VALID_FOR * notifier.resend_s * NS)


def request_for(notifier: Notifier, doc: Mapping[str, Any], *, now_ns: int | None = None) -> tuple[str, Any]:
    """The URL and JSON body to POST for ``doc`` to ``notifier`` (sent at ``now_ns``, default now)."""
    if notifier.type == "slack":
        return notifier.url, slack_body(doc)
    if notifier.type == "alertmanager":
        now_ns = time.time_ns() if now_ns is None else now_ns
        return alertmanager_url(notifier), alertmanager_body(doc, valid_until_ns=valid_until_ns(notifier, now_ns))
    return notifier.url, dict(doc)


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the 3xx answer is the attempt's (failed) answer. urllib's default
    handler re-sends to any origin, with the notifier's headers (its ``Authorization``), and to
    ftp:// as well, so a receiver could point the collector at any address; Alertmanager's own
    webhook client does not follow redirects either."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


_OPENER = urllib.request.build_opener(_RefuseRedirects)


def post_json(url: str, body: Any, *, headers: Mapping[str, str] | None = None, timeout_s: float = 5.0) -> Attempt:
    """POST ``body`` as JSON; a 2xx answer is success, a redirect is not followed. Never raises."""
    data = json.dumps(body, default=str).encode()
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("User-Agent", USER_AGENT)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    started = time.monotonic()
    status: int | None = None
    error = ""
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            status = int(resp.status)
            resp.read(65536)
    except urllib.error.HTTPError as exc:
        status = exc.code
        error = f"HTTP {exc.code} {exc.reason}"
        if 300 <= exc.code < 400:
            location = exc.headers.get("Location", "?") if exc.headers is not None else "?"
            error += f": redirect to {str(location)[:200]!r} not followed (give the notifier's final URL)"
    except urllib.error.URLError as exc:
        error = f"cannot reach {url}: {exc.reason}"
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    duration_ms = (time.monotonic() - started) * 1000
    ok = status is not None and 200 <= status < 300
    return Attempt(ok=ok, status=status, error="" if ok else (error or f"HTTP {status}"), duration_ms=duration_ms)


# ---------------------------------------------------------------------------------- the sender


class Sender:
    """Delivers due notifications: ``run_once`` now, or ``start``/``stop`` on a thread with a pool.

    ``rules`` gives the notifiers in force (a ``RuleSet``, ``Rules``, or a callable); a
    notification whose notifier is no longer in the file fails at once, saying so.
    """

    def __init__(
        self,
        engine: Engine,
        rules: RuleSet | Rules | Callable[[], Rules],
        *,
        workers: int = 4,
        poll_s: float = 0.5,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 300.0,
        give_up_s: float = 86400.0,
        claim_margin_s: float = 30.0,
        post: Callable[..., Attempt] = post_json,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self._rules: Callable[[], Rules] = rules_source(rules)
        self.workers = max(1, workers)
        self.poll_s = poll_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.give_up_ns = int(give_up_s * NS)
        self.claim_margin_ns = int(claim_margin_s * NS)
        self._post = post
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: set[int] = set()
        self._next_resend: dict[str, float] = {}  # notifier -> monotonic time of its next re-send
        self._resending: set[str] = set()
        self._lock = threading.Lock()
        self._write_lock = threading.local()

    def wake(self) -> None:
        """Look for due notifications now (the alert job calls it after a pass that created some)."""
        self._wake.set()

    def _wl(self) -> WriteLock:
        lock = getattr(self._write_lock, "lock", None)
        if lock is None:  # one per thread: a WriteLock has one holder at a time
            lock = self._write_lock.lock = WriteLock(self.engine)
        return lock

    def backoff_s(self, attempts: int) -> float:
        """The wait after the ``attempts``-th failed attempt."""
        return float(min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, attempts - 1)))

    def _due(self, now_ns: int, limit: int = 100) -> list[int]:
        n = notifications.c
        with self.engine.connect() as conn:
            return [int(r) for r in conn.execute(
                select(n.id).where(n.state == "pending", n.next_attempt_ns <= now_ns)
                .order_by(n.next_attempt_ns, n.id).limit(limit)).scalars()]

    def _claim(self, notification_id: int, now_ns: int) -> dict[str, Any] | None:
        """Take one due notification for this sender; None when another took it or it is not due."""
        n = notifications.c
        with self._wl(), self.engine.begin() as conn:
            row = conn.execute(select(notifications).where(n.id == notification_id)).first()
            if row is None or row.state != "pending" or row.next_attempt_ns > now_ns:
                return None
            notifier = self._rules().notifiers.get(row.notifier)
            timeout_ns = int((notifier.timeout_s if notifier else 5.0) * NS)
            claimed = conn.execute(
                update(notifications)
                .where(n.id == notification_id, n.state == "pending", n.next_attempt_ns == row.next_attempt_ns)
                .values(next_attempt_ns=now_ns + timeout_ns + self.claim_margin_ns)
            )
            if claimed.rowcount != 1:
                return None
            return dict(row._mapping)

    def _deliver(self, row: dict[str, Any]) -> Attempt:
        notifier = self._rules().notifiers.get(row["notifier"])
        if notifier is None:
            attempt = Attempt(ok=False, status=None, error=f"notifier {row['notifier']!r} is not in the rules file",
                              duration_ms=0.0)
            self._record(row, attempt, give_up=True)
            return attempt
        url, body = request_for(notifier, row["payload"], now_ns=self._clock())
        attempt = self._post(url, body, headers=notifier.headers, timeout_s=notifier.timeout_s)
        self._record(row, attempt)
        if not attempt.ok:
            log.info("notification %d to %s (%s %s) failed: %s", row["id"], notifier.name, row["payload"].get("rule"),
                     row["transition"], attempt.error)
        return attempt

    def _record(self, row: dict[str, Any], attempt: Attempt, *, give_up: bool = False) -> None:
        now_ns = self._clock()
        attempts = int(row["attempts"]) + 1
        values: dict[str, Any] = {"attempts": attempts, "last_error": attempt.error[:2000]}
        if attempt.ok:
            values.update(state="delivered", delivered_ns=now_ns)
        elif give_up or now_ns - int(row["created_ns"]) >= self.give_up_ns:
            values.update(state="failed")
        else:
            values.update(next_attempt_ns=now_ns + int(self.backoff_s(attempts) * NS))
        with self._wl(), self.engine.begin() as conn:
            conn.execute(insert(notification_attempts).values(
                notification_id=row["id"], ts_ns=now_ns, ok=attempt.ok, status=attempt.status,
                error=attempt.error[:2000], duration_ms=attempt.duration_ms))
            conn.execute(update(notifications).where(notifications.c.id == row["id"]).values(**values))

    def run_once(self, now_ns: int | None = None) -> int:
        """Claim and deliver every due notification, one after another; returns how many were tried."""
        now_ns = self._clock() if now_ns is None else now_ns
        tried = 0
        for nid in self._due(now_ns):
            row = self._claim(nid, now_ns)
            if row is not None:
                self._deliver(row)
                tried += 1
        return tried

    # -- re-sending what still fires to Alertmanager -----------------------------------------

    def firing_documents(self, notifier: str) -> list[dict[str, Any]]:
        """The documents of the alerts firing now whose "firing" was delivered to ``notifier``."""
        n, a = notifications.c, alerts.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(n.payload).join(alerts, a.id == n.alert_id)
                .where(n.notifier == notifier, n.transition == ALERT_FIRING, n.state == "delivered",
                       a.state == ALERT_FIRING)
                .order_by(n.alert_id))
            return [dict(r[0]) for r in rows]

    def resend(self, notifier: Notifier, now_ns: int | None = None) -> tuple[int, list[Attempt]]:
        """POST every alert still firing to an Alertmanager ``notifier`` again, with a fresh
        ``endsAt``; returns how many alerts and the attempts (one per ``RESEND_BATCH``)."""
        now_ns = self._clock() if now_ns is None else now_ns
        docs = self.firing_documents(notifier.name)
        until = valid_until_ns(notifier, now_ns)
        attempts = []
        for i in range(0, len(docs), RESEND_BATCH):
            body = [a for d in docs[i : i + RESEND_BATCH] for a in alertmanager_body(d, valid_until_ns=until)]
            attempt = self._post(alertmanager_url(notifier), body, headers=notifier.headers, timeout_s=notifier.timeout_s)
            if not attempt.ok:
                log.warning("re-sending %d firing alerts to %s failed (tried again in %g s): %s", len(body),
                            notifier.name, notifier.resend_s, attempt.error)
            attempts.append(attempt)
        return len(docs), attempts

    def resend_once(self, now_ns: int | None = None) -> int:
        """Re-send to every Alertmanager notifier now; returns how many alerts were sent."""
        return sum(self.resend(nt, now_ns)[0] for nt in self._rules().notifiers.values() if nt.type == "alertmanager")

    def _resend_due(self) -> None:
        """On the loop: start the re-sends whose interval has passed, each on the pool."""
        assert self._pool is not None
        now = time.monotonic()
        for nt in self._rules().notifiers.values():
            if nt.type != "alertmanager":
                continue
            with self._lock:
                if nt.name in self._resending:
                    continue
                due = self._next_resend.setdefault(nt.name, now + nt.resend_s)
                if now < due:
                    continue
                self._next_resend[nt.name] = now + nt.resend_s
                self._resending.add(nt.name)
            self._pool.submit(self._resend_then_release, nt)

    def _resend_then_release(self, notifier: Notifier) -> None:
        try:
            self.resend(notifier)
        except Exception as exc:  # the database went away: the next interval tries again
            log.warning("re-sending firing alerts to %s: %s", notifier.name, exc)
        finally:
            with self._lock:
                self._resending.discard(notifier.name)

    # -- on threads ---------------------------------------------------------------------------

    def _deliver_then_release(self, row: dict[str, Any]) -> None:
        try:
            self._deliver(row)
        except Exception as exc:  # the database went away mid-record: the claim expires, another retries
            log.warning("notification %d: %s", row["id"], exc)
        finally:
            with self._lock:
                self._in_flight.discard(row["id"])
            self._wake.set()

    def _loop(self) -> None:
        assert self._pool is not None
        while not self._stop.is_set():
            self._wake.clear()
            try:
                now_ns = self._clock()
                for nid in self._due(now_ns):
                    with self._lock:
                        if nid in self._in_flight or len(self._in_flight) >= 4 * self.workers:
                            continue
                    row = self._claim(nid, now_ns)
                    if row is None:
                        continue
                    with self._lock:
                        self._in_flight.add(nid)
                    self._pool.submit(self._deliver_then_release, row)
                self._resend_due()
            except Exception as exc:  # database busy or restarting: try again on the next round
                log.warning("notification sender: %s", exc)
            self._wake.wait(self.poll_s)

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="fleetscope-notify")
        self._thread = threading.Thread(target=self._loop, name="fleetscope-notify", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
