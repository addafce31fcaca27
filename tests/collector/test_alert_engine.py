"""The alert job's states (pending -> firing -> resolved, ``for``), its notifications (one per
transition and notifier, also with two jobs on one database), silences, and delivery: the bodies
each notifier type gets, retries with every attempt recorded, and claims. Real SQLite and
PostgreSQL; a real HTTP receiver on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from sqlalchemy import Engine, insert, select, update
from sqlalchemy.orm import Session

from fleetscope.collector.alerting.engine import AlertJob, fingerprint
from fleetscope.collector.alerting.notifiers import Sender, alertmanager_body, slack_body
from fleetscope.collector.alerting.rules import RulesError, parse_rules
from fleetscope.collector.alerting.silences import UnknownSilence, add_silence, expire_silence
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import (
    Device,
    Incident,
    alerts,
    gpu_samples,
    notification_attempts,
    notifications,
)
from tests.alert_receiver import Receiver
from tests.latest_rows import refresh_latest

NS = 10**9
T0 = 1_800_000_000 * NS


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def _rules(url: str, extra: str = "", for_: str = "0s"):  # type: ignore[no-untyped-def]
    return parse_rules(f"""
dashboard_url = "http://dash:8501"
[[notifier]]
name = "ops"
type = "webhook"
url = "{url}/hook"
timeout = "2s"
[[notifier]]
name = "chat"
type = "slack"
url = "{url}/slack"
[[notifier]]
name = "am"
type = "alertmanager"
url = "{url}"

[[rule]]
name = "gpu-oom"
incident = ["cuda_oom", "host_oom"]
labels = {{ site = "field" }}
for = "{for_}"
notify = ["ops", "chat", "am"]
{extra}
""")


def _device(engine: Engine, name: str = "drone-1", labels: dict | None = None, seen_ns: int = T0) -> int:
    with Session(engine) as s:
        d = Device(agent_id=f"agent-{name}", name=name, labels={"site": "field"} if labels is None else labels,
                   first_seen_ns=seen_ns, last_seen_ns=seen_ns)
        s.add(d)
        s.commit()
        return d.id


def _incident(engine: Engine, device_id: int, kind: str = "cuda_oom", ts_ns: int = T0, severity: str = "error") -> int:
    with Session(engine) as s:
        i = Incident(device_id=device_id, ts_ns=ts_ns, received_ns=ts_ns, kind=kind, severity=severity,
                     title="CUDA out of memory (2.00 GiB requested)", facts={"requested_bytes": 2 << 30},
                     last_seen_ns=ts_ns, updated_ns=ts_ns, gpu_index=0)
        s.add(i)
        s.commit()
        return i.id


def _resolve(engine: Engine, incident_id: int) -> None:
    with engine.begin() as c:
        c.execute(update(Incident.__table__).where(Incident.__table__.c.id == incident_id).values(state="resolved"))


def _notifications(engine: Engine) -> list:
    with engine.connect() as c:
        return list(c.execute(select(notifications).order_by(notifications.c.id)))


def _alerts(engine: Engine) -> list:
    with engine.connect() as c:
        return list(c.execute(select(alerts).order_by(alerts.c.id)))


def test_incident_rule_fires_once_per_incident_and_resolves_with_it(engine: Engine) -> None:
    dev = _device(engine)
    other = _device(engine, "lab-1", labels={"site": "lab"})
    inc = _incident(engine, dev)
    _incident(engine, other)  # outside the rule's label selector
    _incident(engine, dev, kind="gpu_xid")  # a kind the rule does not name
    job = AlertJob(engine, _rules("http://127.0.0.1:9"))
    r = job.run_once(T0 + NS)
    assert (r.fired, r.notifications) == (1, 3)
    for k in range(2, 6):
        r = job.run_once(T0 + k * NS)
        assert (r.fired, r.resolved, r.notifications) == (0, 0, 0), "an alert notifies once per transition"
    (a,) = _alerts(engine)
    assert (a.rule, a.state, a.device_id, a.incident_id, a.kind, a.severity) == ("gpu-oom", "firing", dev, inc, "cuda_oom", "error")
    assert a.fingerprint == fingerprint("gpu-oom", f"incident:{inc}")
    assert a.labels == {"site": "field", "gpu": "0"} and a.facts["requested_bytes"] == 2 << 30
    assert a.last_eval_ns == T0 + 5 * NS
    _resolve(engine, inc)
    r = job.run_once(T0 + 10 * NS)
    assert (r.resolved, r.notifications) == (1, 3)
    assert job.run_once(T0 + 11 * NS).notifications == 0
    (a,) = _alerts(engine)
    assert (a.state, a.firing_ns, a.resolved_ns) == ("resolved", T0 + NS, T0 + 10 * NS)
    rows = _notifications(engine)
    assert sorted((n.transition, n.notifier) for n in rows) == sorted(
        (t, n) for t in ("firing", "resolved") for n in ("ops", "chat", "am"))
    firing = next(n for n in rows if n.transition == "firing" and n.notifier == "ops").payload
    assert {k: firing[k] for k in ("rule", "state", "device", "kind", "severity", "incident_id")} == {
        "rule": "gpu-oom", "state": "firing", "device": "drone-1", "kind": "cuda_oom", "severity": "error", "incident_id": inc}
    assert firing["summary"] == "CUDA out of memory (2.00 GiB requested) on drone-1"
    assert firing["dashboard_url"] == "http://dash:8501/alerts?rule=gpu-oom&device=drone-1"
    assert firing["started"].endswith("Z") and firing["ended"] is None
    resolved = next(n for n in rows if n.transition == "resolved" and n.notifier == "ops").payload
    assert resolved["state"] == "resolved" and resolved["ended_ns"] == T0 + 10 * NS


def test_for_holds_an_alert_pending_and_drops_it_if_the_condition_clears(engine: Engine) -> None:
    dev = _device(engine)
    job = AlertJob(engine, _rules("http://127.0.0.1:9", for_="30s"))
    inc = _incident(engine, dev)
    assert job.run_once(T0).pending == 1
    assert job.run_once(T0 + 29 * NS).fired == 0
    assert _alerts(engine)[0].state == "pending" and not _notifications(engine)
    r = job.run_once(T0 + 30 * NS)
    assert (r.fired, r.notifications) == (1, 3)
    assert _alerts(engine)[0].firing_ns == T0 + 30 * NS
    # A second incident clears before its `for` is over: dropped, no notification.
    inc2 = _incident(engine, dev, ts_ns=T0 + 31 * NS)
    assert job.run_once(T0 + 31 * NS).pending == 1
    _resolve(engine, inc2)
    r = job.run_once(T0 + 40 * NS)
    assert (r.dropped, r.notifications) == (1, 0)
    states = {a.incident_id: (a.state, a.firing_ns) for a in _alerts(engine)}
    assert states == {inc: ("firing", T0 + 30 * NS), inc2: ("resolved", None)}


def test_metric_summary_says_the_reading_in_its_unit(engine: Engine) -> None:
    # Before: "gpu.memory_used_bytes 1.20561e+09 above 1e+09" (issue 27, item 10).
    dev = _device(engine)
    rules = _rules("http://127.0.0.1:9", extra="""
[[rule]]
name = "gpu-memory"
metric = "gpu.memory_used_bytes"
above = 1000000000
notify = ["ops"]
""")
    with engine.begin() as c:
        c.execute(insert(gpu_samples), [{"device_id": dev, "ts_ns": T0, "gpu_index": 0, "memory_used_bytes": 1205610000}])
        refresh_latest(c)
    assert AlertJob(engine, rules).run_once(T0 + NS).fired == 1
    (alert,) = _alerts(engine)
    assert alert.summary == "gpu.memory_used_bytes 1.1 GiB above 953.7 MiB on drone-1 GPU 0"
    assert alert.facts["value"] == 1205610000.0, "the facts keep the figure itself"


def test_metric_rule_on_the_newest_sample_per_gpu(engine: Engine) -> None:
    dev = _device(engine)
    rules = _rules("http://127.0.0.1:9", extra="""
[[rule]]
name = "hot-gpu"
metric = "gpu.temp_c"
above = 85
for = "10s"
notify = ["ops"]
""")
    job = AlertJob(engine, rules)

    def temps(ts: int, *values: float) -> None:
        with engine.begin() as c:
            c.execute(insert(gpu_samples), [{"device_id": dev, "ts_ns": ts, "gpu_index": i, "temp_c": v}
                                            for i, v in enumerate(values)])
            refresh_latest(c)

    temps(T0, 90.0, 60.0)
    assert job.run_once(T0 + NS).pending == 1
    temps(T0 + 5 * NS, 91.0, 95.0)  # GPU 1 heats up too
    assert job.run_once(T0 + 6 * NS).pending == 1
    r = job.run_once(T0 + 11 * NS)
    assert r.fired == 1 and r.transitions[0][1] == fingerprint("hot-gpu", f"gpu:{dev}:0")
    hot = next(a for a in _alerts(engine) if a.state == "firing")
    assert hot.summary == "gpu.temp_c 91 C above 85 C on drone-1 GPU 0" and hot.labels["gpu"] == "0"
    assert hot.facts["value"] == 91.0
    temps(T0 + 12 * NS, 70.0, 96.0)
    r = job.run_once(T0 + 16 * NS)
    assert (r.resolved, r.fired) == (1, 1), "GPU 0 cooled down (resolved), GPU 1 held for 10 s (fires)"
    # No sample within the lookback: the condition does not hold.
    r = job.run_once(T0 + 200 * NS)
    assert r.resolved == 1


def test_absent_rule(engine: Engine) -> None:
    dev = _device(engine, seen_ns=T0)
    job = AlertJob(engine, parse_rules('[[rule]]\nname = "silent"\nabsent = "1m"\nseverity = "critical"\n'))
    assert job.run_once(T0 + 30 * NS).active == 0
    r = job.run_once(T0 + 61 * NS)
    assert r.fired == 1
    (a,) = _alerts(engine)
    assert (a.kind, a.severity, a.device_id) == ("absent", "critical", dev) and "no data from drone-1" in a.summary
    with engine.begin() as c:
        c.execute(update(Device.__table__).values(last_seen_ns=T0 + 70 * NS))
    assert job.run_once(T0 + 71 * NS).resolved == 1


def test_a_silence_records_the_transition_but_notifies_no_one(engine: Engine) -> None:
    dev = _device(engine)
    job = AlertJob(engine, _rules("http://127.0.0.1:9"))
    with Session(engine) as s:
        sid = add_silence(session=s, duration_s=60, rule="gpu-oom", device="drone-1", created_by="ops", now_ns=T0)
        add_silence(session=s, duration_s=60, labels={"site": "elsewhere"}, now_ns=T0)  # matches nothing
        s.commit()
    inc = _incident(engine, dev)
    r = job.run_once(T0 + NS)
    assert (r.fired, r.silenced, r.notifications) == (1, 1, 0)
    assert _alerts(engine)[0].silenced_by == sid
    with Session(engine) as s:
        assert expire_silence(sid, session=s, now_ns=T0 + 2 * NS) is True
        assert expire_silence(sid, session=s, now_ns=T0 + 3 * NS) is False
        with pytest.raises(UnknownSilence):
            expire_silence(9999, session=s)
        s.commit()
    _resolve(engine, inc)
    r = job.run_once(T0 + 3 * NS)
    assert (r.resolved, r.notifications) == (1, 3), "the silence expired: the resolution is notified"
    a = _alerts(engine)[0]
    assert a.silenced_by is None
    with Session(engine) as s, pytest.raises(ValueError, match="every alert"):
        add_silence(session=s, duration_s=60)


def test_two_jobs_on_one_database_notify_once(engine: Engine) -> None:
    dev = _device(engine)
    rules = _rules("http://127.0.0.1:9")
    a, b = AlertJob(engine, rules, owner="collector-a"), AlertJob(engine, rules, owner="collector-b")
    _incident(engine, dev)
    ran = [j.run_once(T0 + k * NS).ran for k in range(3) for j in (a, b)]
    assert ran.count(True) == 3, "one holder of the lease at a time"
    a.lease.release()
    b.run_once(T0 + 4 * NS)
    assert len(_notifications(engine)) == 3 and len(_alerts(engine)) == 1


@pytest.mark.server
def test_notifier_payloads_reach_each_receiver_type(engine: Engine, receiver: Receiver) -> None:
    dev = _device(engine)
    rules = _rules(f"http://127.0.0.1:{receiver.port}")
    inc = _incident(engine, dev)
    job = AlertJob(engine, rules)
    job.run_once()
    sender = Sender(engine, rules)
    assert sender.run_once() == 3
    by_path = {p: (b, h) for _, p, b, h in receiver.received}
    assert set(by_path) == {"/hook", "/slack", "/api/v2/alerts"}
    hook, headers = by_path["/hook"]
    assert headers["Content-Type"] == "application/json"
    assert {k: hook[k] for k in ("rule", "state", "device", "kind", "severity")} == {
        "rule": "gpu-oom", "state": "firing", "device": "drone-1", "kind": "cuda_oom", "severity": "error"}
    for key in ("labels", "summary", "facts", "started", "ended", "dashboard_url", "alert_id"):
        assert key in hook
    slack, _ = by_path["/slack"]
    assert slack["text"].startswith(":rotating_light: [FIRING] gpu-oom: CUDA out of memory") and slack["blocks"]
    assert slack == slack_body(hook)
    (am,), _ = by_path["/api/v2/alerts"]
    assert am["labels"]["alertname"] == "gpu-oom" and am["labels"]["device"] == "drone-1" and am["labels"]["site"] == "field"
    assert am["annotations"]["summary"] == hook["summary"] and am["startsAt"] == hook["started"]
    assert am["generatorURL"] == hook["dashboard_url"]
    # A firing alert ends four re-send intervals (1 min by default) after it was sent, unless sent again.
    ends = datetime.fromisoformat(am.pop("endsAt").replace("Z", "+00:00")).timestamp()
    assert 235 < ends - time.time() <= 240
    assert [am] == alertmanager_body(hook)
    assert all(n.state == "delivered" and n.attempts == 1 for n in _notifications(engine))
    _resolve(engine, inc)
    job.run_once()
    assert sender.run_once() == 3
    (am_resolved,) = next(b for _, p, b, _ in receiver.received[3:] if p == "/api/v2/alerts")
    assert am_resolved["endsAt"].endswith("Z")
    assert sender.run_once() == 0, "nothing owed twice"


@pytest.mark.server
def test_a_receiver_that_is_down_gets_retries_then_one_delivery(engine: Engine, receiver: Receiver) -> None:
    dev = _device(engine)
    rules = parse_rules(f'[[notifier]]\nname = "ops"\ntype = "webhook"\nurl = "{receiver.url()}"\n'
                        '[[rule]]\nname = "oom"\nincident = ["cuda_oom"]\nnotify = ["ops"]\n')
    _incident(engine, dev)
    AlertJob(engine, rules).run_once()
    clock = [time.time_ns()]
    sender = Sender(engine, rules, backoff_initial_s=1.0, backoff_max_s=4.0, clock=lambda: clock[0])
    receiver.status = 503
    waits = []
    for _ in range(4):
        assert sender.run_once() == 1
        (n,) = _notifications(engine)
        waits.append(round((n.next_attempt_ns - clock[0]) / NS))
        assert sender.run_once() == 0, "not due again before its backoff"
        clock[0] = n.next_attempt_ns
    assert waits == [1, 2, 4, 4], "exponential backoff, capped"
    receiver.status = 200
    assert sender.run_once() == 1
    (n,) = _notifications(engine)
    assert (n.state, n.attempts) == ("delivered", 5)
    with engine.connect() as c:
        tries = list(c.execute(select(notification_attempts).order_by(notification_attempts.c.id)))
    assert [(t.ok, t.status) for t in tries] == [(False, 503)] * 4 + [(True, 200)]
    assert "503" in tries[0].error and len(receiver.bodies()) == 1
    receiver.stop()  # now the port is closed: no answer at all
    _resolve(engine, _incident(engine, dev, ts_ns=T0 + NS))


def test_a_receiver_down_past_the_give_up_time_fails_the_notification(engine: Engine) -> None:
    dev = _device(engine)
    rules = parse_rules('[[notifier]]\nname = "ops"\ntype = "webhook"\nurl = "http://127.0.0.1:9/x"\ntimeout = "1s"\n'
                        '[[rule]]\nname = "oom"\nincident = ["cuda_oom"]\nnotify = ["ops"]\n')
    _incident(engine, dev)
    AlertJob(engine, rules).run_once()
    sender = Sender(engine, rules, give_up_s=0)
    assert sender.run_once() == 1
    (n,) = _notifications(engine)
    assert n.state == "failed" and n.attempts == 1 and "cannot reach" in n.last_error


def test_two_senders_never_claim_the_same_notification(engine: Engine) -> None:
    dev = _device(engine)
    rules = _rules("http://127.0.0.1:9")
    _incident(engine, dev)
    AlertJob(engine, rules).run_once()
    a, b = Sender(engine, rules), Sender(engine, rules)
    now = time.time_ns()
    ids = [n.id for n in _notifications(engine)]
    claims = [(a._claim(i, now), b._claim(i, now)) for i in ids]
    assert all((x is None) != (y is None) for x, y in claims)
    assert a._due(now) == [] and b._due(now) == [], "claimed notifications are not due"


@pytest.mark.server  # the receiver: an HTTP server in this process
def test_firing_alerts_are_sent_to_alertmanager_again_each_resend_with_a_fresh_ends_at(
        engine: Engine, receiver: Receiver) -> None:
    """Alertmanager resolves an alert at its endsAt (or resolve_timeout after it last heard of it):
    every ``resend`` the alerts still firing go to it again, until they resolve."""
    dev = _device(engine)
    rules = parse_rules(f'[[notifier]]\nname = "am"\ntype = "alertmanager"\nurl = "{receiver.url()}"\nresend = "10s"\n'
                        '[[rule]]\nname = "oom"\nincident = ["cuda_oom"]\nnotify = ["am"]\n')
    assert rules.notifiers["am"].resend_s == 10.0
    first, second = _incident(engine, dev), _incident(engine, dev, ts_ns=T0 + NS)
    job = AlertJob(engine, rules)
    job.run_once()
    sender = Sender(engine, rules)
    assert sender.run_once() == 2 and len(receiver.bodies()) == 2
    now = time.time_ns()
    assert sender.resend_once(now) == 2
    (again,) = receiver.bodies()[2:]
    assert len(again) == 2 and {a["labels"]["alertname"] for a in again} == {"oom"}
    for a in again:
        ends = datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00")).timestamp()
        assert abs(ends - (now / NS + 40)) < 0.01, "endsAt = now + 4 x resend"
    _resolve(engine, first)
    job.run_once()
    assert sender.run_once() == 1, "the resolution, once"
    assert sender.resend_once() == 1, "only what still fires is sent again"
    _resolve(engine, second)
    job.run_once()
    sender.run_once()
    assert sender.resend_once() == 0


def test_resend_applies_to_alertmanager_notifiers_only() -> None:
    with pytest.raises(RulesError, match="alertmanager notifiers only"):
        parse_rules('[[notifier]]\nname = "ops"\ntype = "webhook"\nurl = "http://x/"\nresend = "1m"\n')
    with pytest.raises(RulesError, match="at least 1s"):
        parse_rules('[[notifier]]\nname = "am"\ntype = "alertmanager"\nurl = "http://x/"\nresend = "100ms"\n')


def test_a_metric_alert_holds_between_the_batches_of_a_device_that_sends_every_minute(engine: Engine) -> None:
    """A drone's readings arrive 60 s at a time: between two batches its newest reading is up to a
    batch interval older than the lookback, and that is no reason to resolve its alert. A device
    silent for longer than lookback plus its interval is still no longer over the threshold."""
    drone, server = _device(engine, "drone-1"), _device(engine, "server-1")
    with engine.begin() as c:
        c.execute(update(Device.__table__).where(Device.__table__.c.id == drone).values(inventory={"batch_interval_s": 60.0}))
        c.execute(update(Device.__table__).where(Device.__table__.c.id == server).values(inventory={"batch_interval_s": 1.0}))
        c.execute(insert(gpu_samples), [{"device_id": d, "ts_ns": T0, "gpu_index": 0, "temp_c": 90.0} for d in (drone, server)])
        refresh_latest(c)
    job = AlertJob(engine, _rules("http://127.0.0.1:9", extra="""
[[rule]]
name = "hot-gpu"
metric = "gpu.temp_c"
above = 85
lookback = "10s"
notify = ["ops"]
"""))
    assert job.run_once(T0 + NS).fired == 2
    r = job.run_once(T0 + 40 * NS)  # the drone's next batch is still on its way; the server is silent
    firing = {a.device_id for a in _alerts(engine) if a.state == "firing"}
    assert (r.resolved, firing) == (1, {drone})
    assert job.run_once(T0 + 75 * NS).resolved == 1, "past lookback + 60 s the drone's reading is too old too"
