"""The alerts read API (``list_alerts``, ``list_silences``, ``alert_notifications``,
``alert_periods``) on SQLite and PostgreSQL.

Devices are registered through the real registry; the alert, silence and notification rows are
written here as the alert job writes them (its own writer lands beside this), so these tests
pin what a reader sees of each column."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from fleetscope.collector.query import (
    AlertPeriod,
    UnknownDevice,
    alert_notifications,
    alert_periods,
    list_alerts,
    list_silences,
    to_jsonable,
)
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.schema import alerts, notification_attempts, notifications, silences
from fleetscope.proto.v1 import telemetry_pb2 as pb

S = 10**9
NOW = time.time_ns() // S * S


def _device(engine: Any, name: str, labels: dict[str, str]) -> int:
    req = pb.RegisterRequest(agent_id=f"id-{name}", boot_id="boot", name=name, labels=labels, sent_ns=NOW)
    return register_device(engine, req, received_ns=NOW).device_id


def _alert(session: Session, **kw: Any) -> int:
    row: dict[str, Any] = {
        "rule": "gpu-oom",
        "fingerprint": f"fp-{kw.get('rule', 'gpu-oom')}-{kw.get('device_id')}-{kw.get('pending_ns')}",
        "state": "firing",
        "device_id": None,
        "incident_id": None,
        "kind": "cuda_oom",
        "severity": "critical",
        "summary": "CUDA out of memory",
        "labels": {},
        "facts": {},
        "firing_ns": None,
        "resolved_ns": None,
        "last_eval_ns": NOW,
        "silenced_by": None,
    }
    row.update(kw)
    return int(session.execute(insert(alerts).values(**row).returning(alerts.c.id)).scalar_one())


@pytest.fixture
def db(db_url: str) -> Iterator[tuple[Any, dict[str, int]]]:
    engine = make_engine(db_url)
    ids = {
        "drone-1": _device(engine, "drone-1", {"site": "field", "team": "vision"}),
        "drone-2": _device(engine, "drone-2", {"site": "lab"}),
    }
    with Session(engine) as s, s.begin():
        d1, d2 = ids["drone-1"], ids["drone-2"]
        ids["firing"] = _alert(
            s,
            device_id=d1,
            labels={"site": "field", "team": "vision"},
            pending_ns=NOW - 600 * S,
            firing_ns=NOW - 540 * S,
            incident_id=7,
            facts={"requested_bytes": 1 << 30},
        )
        ids["pending"] = _alert(
            s,
            rule="hot-gpu",
            kind="metric",
            severity="warning",
            state="pending",
            device_id=d2,
            labels={"site": "lab", "gpu": "0"},
            pending_ns=NOW - 60 * S,
            summary="gpu.temp_c above 85",
        )
        ids["resolved"] = _alert(
            s,
            device_id=d1,
            labels={"site": "field"},
            state="resolved",
            pending_ns=NOW - 7200 * S,
            firing_ns=NOW - 7140 * S,
            resolved_ns=NOW - 3600 * S,
        )
        ids["fleetwide"] = _alert(
            s,
            rule="slo-infer",
            kind="slo",
            labels={"site": "field"},
            pending_ns=NOW - 300 * S,
            firing_ns=NOW - 240 * S,
        )
        # silences: one for rule hot-gpu on drone-2 (active), one expired, one on labels (active)
        for rule, device, labels, created, expires in [
            ("hot-gpu", "drone-2", {}, NOW - 120 * S, NOW + 3600 * S),
            ("gpu-oom", None, {}, NOW - 7200 * S, NOW - 3600 * S),
            (None, None, {"team": "vision", "site": "field"}, NOW - 10 * S, NOW + 60 * S),
        ]:
            s.execute(
                insert(silences).values(
                    rule=rule,
                    device=device,
                    labels=labels,
                    created_ns=created,
                    expires_ns=expires,
                    created_by="ops",
                    comment="maintenance",
                )
            )
        n = s.execute(
            insert(notifications)
            .values(
                alert_id=ids["firing"],
                transition="firing",
                notifier="ops",
                payload={"state": "firing"},
                state="delivered",
                attempts=2,
                created_ns=NOW - 540 * S,
                next_attempt_ns=NOW - 530 * S,
                delivered_ns=NOW - 530 * S,
                last_error="",
            )
            .returning(notifications.c.id)
        ).scalar_one()
        s.execute(
            insert(notification_attempts),
            [
                {
                    "notification_id": n,
                    "ts_ns": NOW - 530 * S,
                    "ok": True,
                    "status": 200,
                    "error": "",
                    "duration_ms": 3.5,
                },
                {
                    "notification_id": n,
                    "ts_ns": NOW - 540 * S,
                    "ok": False,
                    "status": None,
                    "error": "connection refused",
                    "duration_ms": 0.4,
                },
            ],
        )
    yield engine, ids
    engine.dispose()


def test_list_alerts_states_rule_device_and_order(db: tuple[Any, dict[str, int]]) -> None:
    engine, ids = db
    with Session(engine) as s:
        every = list_alerts(session=s, now_ns=NOW)
        assert [a.id for a in every] == [ids["pending"], ids["fleetwide"], ids["firing"], ids["resolved"]]
        live = list_alerts(session=s, states=["firing", "pending"], now_ns=NOW)
        assert {a.id for a in live} == {ids["pending"], ids["fleetwide"], ids["firing"]}
        assert [a.id for a in list_alerts(session=s, rule="gpu-oom", now_ns=NOW)] == [
            ids["firing"],
            ids["resolved"],
        ]
        assert [a.id for a in list_alerts(session=s, device="drone-2", now_ns=NOW)] == [ids["pending"]]
        assert [a.id for a in list_alerts(session=s, device="id-drone-2", now_ns=NOW)] == [ids["pending"]]
        with pytest.raises(UnknownDevice, match="drone-1"):
            list_alerts(session=s, device="nobody")
        assert len(list_alerts(session=s, limit=2, now_ns=NOW)) == 2

    a = next(a for a in every if a.id == ids["firing"])
    assert (a.rule, a.state, a.device_name, a.device_id, a.incident_id) == (
        "gpu-oom",
        "firing",
        "drone-1",
        ids["drone-1"],
        7,
    )
    assert (a.pending_ns, a.firing_ns, a.resolved_ns) == (NOW - 600 * S, NOW - 540 * S, None)
    assert a.facts == {"requested_bytes": 1 << 30} and a.labels == {"site": "field", "team": "vision"}
    fleetwide = next(a for a in every if a.id == ids["fleetwide"])
    assert fleetwide.device_id is None and fleetwide.device_name is None
    assert to_jsonable(a)["firing_ns"] == NOW - 540 * S  # plain values all the way down


def test_list_alerts_labels_and_window(db: tuple[Any, dict[str, int]]) -> None:
    engine, ids = db
    with Session(engine) as s:

        def got(**kw: Any) -> set[int]:
            return {a.id for a in list_alerts(session=s, now_ns=NOW, **kw)}

        assert got(labels={"site": "field"}) == {ids["firing"], ids["resolved"], ids["fleetwide"]}
        assert got(labels={"site": "field", "team": "vision"}) == {ids["firing"]}
        assert got(labels=["site=field", "site=lab"]) == set(
            ids[k] for k in ("firing", "resolved", "fleetwide", "pending")
        )
        assert got(labels=["site=lab", "gpu=1"]) == set()
        # active at some time in the window: the resolved one ended an hour ago
        assert got(since_ns=NOW - 1800 * S) == {ids["firing"], ids["pending"], ids["fleetwide"]}
        assert got(since_ns=NOW - 5000 * S, until_ns=NOW - 4000 * S) == {ids["resolved"]}
        assert got(until_ns=NOW - 400 * S) == {ids["firing"], ids["resolved"]}


def test_silenced_is_judged_now(db: tuple[Any, dict[str, int]]) -> None:
    engine, ids = db
    with Session(engine) as s:
        held = {a.id: a.silenced for a in list_alerts(session=s, now_ns=NOW)}
        # hot-gpu on drone-2 silenced by rule+device; the firing OOM by the labels silence; the
        # expired gpu-oom silence holds nothing; the fleet-wide one lacks the team label.
        assert held == {
            ids["pending"]: True,
            ids["firing"]: True,
            ids["fleetwide"]: False,
            ids["resolved"]: False,
        }
        assert {a.id for a in list_alerts(session=s, silenced=True, now_ns=NOW)} == {
            ids["pending"],
            ids["firing"],
        }
        later = {a.id: a.silenced for a in list_alerts(session=s, now_ns=NOW + 120 * S)}
        assert later[ids["firing"]] is False and later[ids["pending"]] is True  # the labels silence expired
        before = {a.id: a.silenced for a in list_alerts(session=s, now_ns=NOW - 5000 * S)}
        assert before[ids["firing"]] is True  # the gpu-oom silence was in force then


def test_list_silences(db: tuple[Any, dict[str, int]]) -> None:
    engine, _ = db
    with Session(engine) as s:
        every = list_silences(session=s)
        assert [x.created_ns for x in every] == [NOW - 10 * S, NOW - 120 * S, NOW - 7200 * S]
        active = list_silences(session=s, active_at_ns=NOW)
        assert [(x.rule, x.device, x.labels) for x in active] == [
            (None, None, {"team": "vision", "site": "field"}),
            ("hot-gpu", "drone-2", {}),
        ]
        assert active[0].created_by == "ops" and active[0].comment == "maintenance"
        assert [x.rule for x in list_silences(session=s, active_at_ns=NOW - 5000 * S)] == ["gpu-oom"]


def test_alert_notifications_with_attempts(db: tuple[Any, dict[str, int]]) -> None:
    engine, ids = db
    with Session(engine) as s:
        (n,) = alert_notifications(ids["firing"], session=s)
        assert alert_notifications(ids["pending"], session=s) == []
    assert (n.alert_id, n.transition, n.notifier, n.state, n.delivered_ns) == (
        ids["firing"],
        "firing",
        "ops",
        "delivered",
        NOW - 530 * S,
    )
    assert n.payload == {"state": "firing"}
    assert [(t.ok, t.status, t.error) for t in n.attempts] == [
        (False, None, "connection refused"),
        (True, 200, ""),
    ]
    assert n.attempts[1].duration_ms == pytest.approx(3.5)


def test_alert_periods(db: tuple[Any, dict[str, int]]) -> None:
    engine, ids = db
    with Session(engine) as s:
        periods = alert_periods(ids["drone-1"], NOW - 86400 * S, NOW, session=s)
        assert periods == [
            AlertPeriod(
                ids["resolved"],
                "gpu-oom",
                "cuda_oom",
                "critical",
                "resolved",
                "CUDA out of memory",
                NOW - 7200 * S,
                NOW - 7140 * S,
                NOW - 3600 * S,
            ),
            AlertPeriod(
                ids["firing"],
                "gpu-oom",
                "cuda_oom",
                "critical",
                "firing",
                "CUDA out of memory",
                NOW - 600 * S,
                NOW - 540 * S,
                None,
            ),
        ]
        assert [p.alert_id for p in alert_periods("drone-1", NOW - 1800 * S, NOW, session=s)] == [
            ids["firing"]
        ]
        assert alert_periods(ids["drone-2"], NOW - 86400 * S, NOW - 3600 * S, session=s) == []
        with pytest.raises(UnknownDevice):
            alert_periods("nobody", 0, NOW, session=s)


def test_the_alerts_and_silence_commands_print_their_tables(db: tuple[Any, dict[str, int]],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """What an operator reads: every alert of the history with its state, rule and device, and
    every silence with its scope (the table path, beside --json)."""
    from fleetscope.cli import main

    engine, ids = db
    url = engine.url.render_as_string(hide_password=False)
    assert main(["alerts", "--db", url, "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["ID", "STATE", "RULE", "DEVICE"]
    rows = {int(ln.split()[0]): ln.split() for ln in lines[1:]}
    assert set(rows) == {ids["firing"], ids["pending"], ids["resolved"], ids["fleetwide"]}
    assert rows[ids["pending"]][1:5] == ["pending", "(silenced)", "hot-gpu", "drone-2"]  # a silence holds it
    assert rows[ids["resolved"]][1] == "resolved" and rows[ids["fleetwide"]][2:4] == ["slo-infer", "-"]
    assert main(["silence", "list", "--db", url, "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "RULE", "DEVICE"] and len(lines) == 4
    assert any(ln.split()[1:3] == ["hot-gpu", "drone-2"] for ln in lines[1:])
