"""The Alerts page, the Fleet page's Alerts section and the alert periods on the Device page,
through Streamlit's AppTest, on the pipeline's database (real devices and incidents; the alert
rows as the alert job writes them, see ``pipeline.write_alerts``)."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from fleetscope.collector.query import search_incidents
from fleetscope.collector.storage.engine import make_engine
from tests.dashboard.conftest import app, chart_data, frame, no_errors, texts
from tests.dashboard.pipeline import Pipeline

NS = 10**9


def _ids(df) -> list[int]:  # type: ignore[no-untyped-def]
    return [int(x) for x in df["id"]]


def _incident_id(pipeline: Pipeline, kind: str) -> int:
    engine = make_engine(pipeline.url, create=False)
    try:
        with Session(engine) as s:
            return search_incidents(session=s, since_ns=0, until_ns=time.time_ns() + NS, kinds=[kind])[0].id
    finally:
        engine.dispose()


def test_alerts_page_lists_firing_pending_silenced_and_history(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "alerts").run()
    no_errors(at)
    assert at.title[0].value == "Alerts"
    firing = frame(at, "alerts_firing")
    assert _ids(firing) == [ids["oom"]]
    row = firing.iloc[0]
    assert (
        row["Rule"] == "gpu-oom"
        and list(row["Severity"]) == ["critical"]
        and list(row["State"]) == ["firing"]
    )
    # Each alert links to its device and its incident.
    assert row["Device"] == f"device?device={pipeline.servers[0]}"
    assert row["Incident"] == f"incidents?incident={_incident_id(pipeline, 'cuda_oom')}"
    assert list(row["Labels"]), "the alert's labels are shown"
    pending = frame(at, "alerts_pending")
    assert _ids(pending) == [ids["hot"]] and list(pending.iloc[0]["State"]) == ["pending"]
    silenced = frame(at, "alerts_silenced")
    assert _ids(silenced) == [ids["offline"]], "a silenced firing alert is listed as silenced, not firing"
    history = frame(at, "alerts_history")
    assert _ids(history) == [ids["xid"], ids["old_hot"]], "24 h: the one of three hours ago too; newest first"
    assert set(history.columns) >= {"Started", "Resolved", "Lasted"}
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Firing"], metrics["Pending"], metrics["Silenced"]) == ("1", "1", "1")
    assert metrics["Resolved (last 24 hours)"] == "2"
    assert "Silences in force (1)" in [e.label for e in at.expander]
    assert "drone out of range" in set(frame(at, "Comment")["Comment"])


def test_alerts_page_filters_are_in_the_url(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "alerts").run()
    at.multiselect(key="alerts_labels").set_value(["fleet=drones"]).run()
    no_errors(at)
    assert at.query_params["label"] == "fleet=drones"
    assert texts(at).count("Nothing is firing.") == 1, "the OOM is on a server"
    assert _ids(frame(at, "alerts_pending")) == [ids["hot"]]
    assert _ids(frame(at, "alerts_silenced")) == [ids["offline"]]
    at.multiselect(key="alerts_rules").set_value(["gpu-hot"]).run()
    assert at.query_params["rule"] == "gpu-hot"
    assert _ids(frame(at, "alerts_history")) == [ids["old_hot"]]
    at.multiselect(key="alerts_views").set_value(["history"]).run()
    assert at.query_params["state"] == "history"
    assert [d.key for d in at.dataframe if d.key and d.key.startswith("alerts_")] == ["alerts_history"]
    # The same view from a link: the filters start from the URL.
    at = app(
        pipeline.url, "alerts", query={"label": "gpu=0", "state": "pending,history", "range": "1h"}
    ).run()
    no_errors(at)
    assert at.multiselect(key="alerts_labels").value == ["gpu=0"]
    assert _ids(frame(at, "alerts_pending")) == [ids["hot"]]
    assert "No alert resolved in this range (last hour)." in texts(at)
    at = app(pipeline.url, "alerts", query={"device": pipeline.servers[1], "range": "24h"}).run()
    assert _ids(frame(at, "alerts_history")) == [ids["xid"]]
    assert "Nothing is firing." in texts(at)


def test_selecting_an_alert_shows_its_notifications(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "alerts").run()
    at.session_state["alerts_firing"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    no_errors(at)
    assert at.query_params["alert"] == str(ids["oom"])
    page = texts(at)
    assert "rule **gpu-oom** · firing · critical · cuda_oom" in page
    assert "pending " in page and "firing " in page and "still firing" in page
    notes = frame(at, "Transition")
    assert list(notes["Transition"]) == ["firing"] and list(notes["State"]) == ["delivered"]
    assert list(notes["Attempts"]) == [2]
    attempts = frame(at, "HTTP status")
    assert list(attempts["Result"]) == ["failed", "delivered"]
    assert list(attempts["HTTP status"]) == ["503", "200"]
    facts = frame(at, "Fact").set_index("Fact")
    assert facts.loc["Requested", "Value"] == "2.00 GiB"


def test_an_alert_opens_from_a_shared_link(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "alerts", query={"alert": str(ids["xid"])}).run()
    no_errors(at)
    page = texts(at)
    assert "rule **gpu-xid** · resolved" in page and "resolved " in page
    assert list(frame(at, "Transition")["Transition"]) == ["firing", "resolved"]
    at = app(pipeline.url, "alerts", query={"alert": str(ids["offline"])}).run()
    assert ":gray[silenced]" in texts(at)
    assert "None sent" in texts(at)
    at = app(pipeline.url, "alerts", query={"alert": "999999"}).run()
    assert "Alert #999999 is not active" in texts(at)
    at = app(pipeline.url, "alerts", query={"alert": "abc"}).run()
    assert "is not an alert number" in texts(at)


def test_fleet_alerts_section_shows_firing_alerts(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "fleet").run()
    no_errors(at)
    assert "Alert rules arrive in a later release" not in texts(at)
    alerts = frame(at, "fleet_alerts")
    assert sorted(_ids(alerts)) == sorted([ids["oom"], ids["offline"]]), "firing ones only, silenced included"
    assert dict(zip(alerts["Rule"], alerts["Silenced"])) == {"gpu-oom": "", "agent-offline": "silenced"}
    assert {m.label: m.value for m in at.metric}["Firing alerts"] == "2"
    incidents = frame(at, "fleet_incidents")
    assert {"gpu_xid", "cuda_oom", "host_oom"} <= set(incidents["Kind"])
    assert (
        all(list(s) in (["open"], ["resolved"]) for s in incidents["State"])
        and (incidents["Count"] >= 1).all()
    )
    row = list(alerts["Rule"]).index("gpu-oom")
    at.session_state["fleet_alerts"] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    no_errors(at)
    assert at.title[0].value == "Alerts" and at.query_params["alert"] == str(ids["oom"])
    assert "rule **gpu-oom**" in texts(at)


def test_device_page_marks_alert_periods(pipeline: Pipeline) -> None:
    ids = pipeline.alerts
    at = app(pipeline.url, "device", query={"device": pipeline.hot, "range": "15m"}).run()
    no_errors(at)
    for title in ("GPU temperature", "GPU utilisation", "SM clock (shaded: throttled)"):
        spans = chart_data(at, title, "alerts")
        assert spans is not None and list(spans["id"]) == [ids["hot"]], title
    span = chart_data(at, "GPU temperature", "alerts").iloc[0]
    assert span["rule"] == "gpu-hot" and span["state"] == "pending" and span["to"] == "now (pending)"
    assert 35_000 <= span["end"] - span["start"] <= 120_000, "from pending until now"
    assert "shaded spans with a bar above are alerts" in texts(at)
    at = app(pipeline.url, "device", query={"device": pipeline.hot, "range": "24h", "tab": "Host"}).run()
    spans = chart_data(at, "CPU", "alerts")
    assert sorted(spans["id"]) == sorted([ids["hot"], ids["old_hot"]]), "the resolved one three hours ago too"
    old = spans.set_index("id").loc[ids["old_hot"]]
    assert abs(old["end"] - old["start"] - 900_000) <= 1 and old["to"] != "now (pending)"
    # A device without alerts: no alert layer, no caption about them.
    at = app(pipeline.url, "device", query={"device": pipeline.drones[1], "range": "15m"}).run()
    assert chart_data(at, "GPU temperature", "alerts") is None
    assert "are alerts" not in texts(at)
    # The Incidents tab: the strip shades them too, the incidents show state and count, and the
    # alerts are listed, each opening on the Alerts page.
    at = app(
        pipeline.url, "device", query={"device": pipeline.servers[0], "range": "15m", "tab": "Incidents"}
    ).run()
    no_errors(at)
    assert list(chart_data(at, "Incidents and alerts", "alerts")["rule"]) == ["gpu-oom"]
    incidents = frame(at, "device_incidents")
    assert {"State", "Count"} <= set(incidents.columns)
    table = frame(at, "device_alerts")
    assert list(table["Rule"]) == ["gpu-oom"] and list(table["To"]) == ["now (firing)"]
    at.session_state["device_alerts"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    assert at.title[0].value == "Alerts" and at.query_params["alert"] == str(ids["oom"])


def test_incidents_page_shows_state_and_count(pipeline: Pipeline) -> None:
    at = app(pipeline.url, "incidents").run()
    no_errors(at)
    table = frame(at, "inc_table")
    assert {"State", "Count", "Last seen"} <= set(table.columns)
    assert all(list(s) in (["open"], ["resolved"]) for s in table["State"])
    assert (table["Count"] >= 1).all()
    at.session_state["inc_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    assert "occurrence" in texts(at), "the detail says how many occurrences it groups"
