"""A fleet larger than one page of the Fleet table (issue 30): the table shows a page of the
devices that pass the filters, in the chosen order, and only that page's sparklines are read;
the devices' states are found without comparing every device with every other.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session

from fleetscope.collector import query
from fleetscope.collector.query.devices import device_state, device_states
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import gpu_rollups, rollup_progress
from fleetscope.collector.storage.schema import Device, gpu_latest
from fleetscope.dashboard.page_fleet import PAGE_SIZE
from tests.dashboard.conftest import app, frame, no_errors, texts

NS = 10**9
MIN = 60 * NS
DEVICES = 130  # more than a page (PAGE_SIZE)
GPUS = 2
OFFLINE = {7, 70, 123}  # silent for a day: sorted first by default


def _fill(engine: Engine, now: int) -> None:
    """DEVICES servers of 2 GPUs, their latest readings and 30 minute rollups; one name installed twice."""
    end = now // MIN * MIN
    devices, latest, rollups = [], [], []
    for i in range(1, DEVICES + 1):
        seen = now - 86400 * NS if i in OFFLINE else now
        devices.append({
            "id": i, "agent_id": f"agent-{i}", "name": f"dev-{i:03d}", "hostname": f"dev-{i:03d}", "kind": "server",
            "labels": {"rack": f"r{i % 3}"}, "first_seen_ns": now - 86400 * NS, "last_seen_ns": seen,
            # Sends every 10 min: online for 30 min whatever the machine's load makes of the test.
            "inventory": {"batch_interval_s": 600, "gpus": [{"index": g, "name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 80 * 2**30}
                                   for g in range(GPUS)]},
        })  # fmt: skip
        for g in range(GPUS):
            latest.append({"device_id": i, "gpu_index": g, "ts_ns": seen - NS, "util_gpu_percent": float(i % 100),
                           "temp_c": 40.0 + i % 50, "power_w": 100.0, "memory_used_bytes": 2.0**30})  # fmt: skip
            for m in range(1, 31):
                u = float((i + m) % 100)  # each device's sparkline its own
                rollups.append({"device_id": i, "step_s": 60, "bucket_ns": end - m * MIN, "gpu_index": g, "n": 60,
                                "span_ns": 59 * NS, "util_avg": u, "temp_max": 50.0 + g, "power_avg": 100.0 + i,
                                "memory_used_avg": float(2**30)})  # fmt: skip
    # dev-001 reinstalled: its first install (silent before the second registered) is "replaced".
    devices.append({**devices[0], "id": DEVICES + 1, "agent_id": "agent-old-1", "first_seen_ns": now - 3 * 86400 * NS,
                    "last_seen_ns": now - 2 * 86400 * NS})  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(Device.__table__), devices)
        conn.execute(insert(gpu_latest), latest)
        conn.execute(insert(gpu_rollups), rollups)
        conn.execute(insert(rollup_progress), [{"device_id": i, "step_s": 60, "rolled_until_ns": end}
                                               for i in range(1, DEVICES + 2)])  # fmt: skip


@pytest.fixture
def fleet_engine(db_url: str):  # type: ignore[no-untyped-def]
    engine = make_engine(db_url)
    now = time.time_ns()
    _fill(engine, now)
    yield engine, now
    engine.dispose()


def test_sparklines_of_some_devices_are_the_full_overviews(fleet_engine) -> None:  # type: ignore[no-untyped-def]
    engine, now = fleet_engine
    with Session(engine) as s:
        full = query.fleet_overview(session=s, now_ns=now)
        bare = query.fleet_overview(session=s, now_ns=now, sparklines=())
        some = ["agent-5", "agent-70", "agent-130", "no-such-agent"]
        part = query.fleet_overview(session=s, now_ns=now, sparklines=some)
        ts, sparks = query.fleet_sparklines(session=s, now_ns=now, agent_ids=some)
    assert len(full.devices) == DEVICES  # the replaced install is not a row
    by_agent = {d.agent_id: d for d in full.devices}
    assert all(len(d.spark_util) == len(full.spark_ts_ns) == 30 for d in full.devices)
    # The minutes before now (the current one has no rollup yet), each device's own.
    assert by_agent["agent-5"].spark_util[-6:] == [float((5 + m) % 100) for m in (5, 4, 3, 2, 1)] + [None]
    spark_fields = ("spark_util", "spark_mem_percent", "spark_temp", "spark_power")
    for without in (bare, part):
        for d in without.devices:
            # Everything but the sparklines is the full overview's.
            assert {k: v for k, v in vars(d).items() if k not in spark_fields} == {
                k: v for k, v in vars(by_agent[d.agent_id]).items() if k not in spark_fields
            }
    assert all(d.spark_util == [] and d.spark_power == [] for d in bare.devices)
    for d in part.devices:
        want = by_agent[d.agent_id]
        if d.agent_id in some:
            assert [getattr(d, f) for f in spark_fields] == [getattr(want, f) for f in spark_fields]
        else:
            assert d.spark_util == []
    assert ts == full.spark_ts_ns
    assert set(sparks) == {"agent-5", "agent-70", "agent-130"}
    for agent, s in sparks.items():
        want = by_agent[agent]
        assert (s.util, s.mem_percent, s.temp, s.power) == (
            want.spark_util,
            want.spark_mem_percent,
            want.spark_temp,
            want.spark_power,
        )
        assert any(v is not None for v in s.util)


def test_device_states_answer_as_device_state_against_the_whole_fleet(fleet_engine) -> None:  # type: ignore[no-untyped-def]
    engine, now = fleet_engine
    with Session(engine) as s:
        every = query.list_devices(session=s, now_ns=now)
    states = device_states(every)
    assert states == {d.agent_id: device_state(d, every) for d in every}
    assert states["agent-old-1"] == query.STATE_REPLACED and states["agent-1"] == "online"
    assert {a for a, st in states.items() if st == "offline"} == {f"agent-{i}" for i in OFFLINE}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_fleet_table_shows_a_page_at_a_time(fleet_engine, db_url: str) -> None:  # type: ignore[no-untyped-def]
    at = app(db_url, "fleet").run()
    no_errors(at)
    table = frame(at, "fleet_table")
    assert len(table) == PAGE_SIZE
    # Offline first (the default sort) across the whole fleet, not within a page.
    assert list(table["Device"][:3]) == [f"dev-{i:03d}" for i in sorted(OFFLINE)]
    assert all(len(s) >= 25 for s in table["Util 30 min"]), "every row on the page has its sparkline"
    assert f"1–{PAGE_SIZE} of {DEVICES} shown, {DEVICES} devices" in " ".join(c.value for c in at.caption)
    metrics = {m.label: (m.value, m.delta) for m in at.metric}
    assert metrics["Online"] == (f"{DEVICES - len(OFFLINE):,}", f"of {DEVICES:,}")
    assert metrics["GPUs"][0] == str(DEVICES * GPUS)

    at.number_input(key="keep_fleet_page").set_value(2).run()
    no_errors(at)
    second = frame(at, "fleet_table")
    assert len(second) == DEVICES - PAGE_SIZE
    assert set(second["Device"]).isdisjoint(table["Device"])
    assert set(second["Device"]) | set(table["Device"]) == {f"dev-{i:03d}" for i in range(1, DEVICES + 1)}
    assert all(len(s) >= 25 for s in second["Util 30 min"])
    at.run()  # a refresh keeps the page
    assert list(frame(at, "fleet_table")["Device"]) == list(second["Device"])

    # Another sort starts at page 1 again, in the new order over the whole fleet.
    at.selectbox(key="keep_fleet_sort").set_value("Name").run()
    assert list(frame(at, "fleet_table")["Device"][:2]) == ["dev-001", "dev-002"]
    assert at.number_input(key="keep_fleet_page").value == 1
    # A filter narrower than a page shows it whole.
    at.multiselect(key="keep_fleet_labels").set_value(["rack=r0"]).run()
    assert len(frame(at, "fleet_table")) == DEVICES // 3
    at.multiselect(key="keep_fleet_labels").set_value([]).run()
    at.selectbox(key="keep_fleet_page_size").set_value(250).run()
    assert len(frame(at, "fleet_table")) == DEVICES
    assert f"{DEVICES} of {DEVICES} devices" in " ".join(c.value for c in at.caption)
    assert "No device matches" not in texts(at)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_page_load_summarises_the_fleet_once(fleet_engine, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The filter bar and the table are drawn from one overview, even when "now" moves on to its
    next quantum in between (at 10,000 devices each overview is a second of the page's time)."""
    import streamlit as st

    from fleetscope.dashboard import timerange

    real_overview, real_now = query.fleet_overview, timerange.now_ns
    asked: list[int] = []
    quanta = iter(range(1, 1000))

    def counted(**kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs["now_ns"])
        return real_overview(**kwargs)

    monkeypatch.setattr(query, "fleet_overview", counted)
    # Every reading of the clock is a quantum later: the worst case for a cache keyed by "now".
    monkeypatch.setattr(timerange, "now_ns", lambda: real_now() + next(quanta) * timerange.QUANTUM_NS)
    st.cache_data.clear()
    at = app(db_url, "fleet").run()
    no_errors(at)
    assert len(frame(at, "fleet_table")) == PAGE_SIZE
    assert len(asked) == 1, asked
    at.run()  # the next run (a refresh) reads the fleet anew, once
    assert len(asked) == 2 and asked[1] > asked[0]


def _caption(at) -> str:  # type: ignore[no-untyped-def]
    return " ".join(c.value for c in at.caption)


def _read_ago_s(at) -> int | None:  # type: ignore[no-untyped-def]
    """The age the table's caption gives its summary ('updated ... (read 58 s ago)'), or None."""
    import re

    found = re.search(r"\(read (\d+) (s|min) ago\)", _caption(at))
    return None if found is None else int(found[1]) * (60 if found[2] == "min" else 1)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("serve_last_after", ["0", "inf"])
def test_a_slow_fleet_summary_is_shown_as_last_read_with_its_age_while_the_next_is_read(  # type: ignore[no-untyped-def]
    fleet_engine, db_url: str, serve_last_after: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--serve-last-after 0`` every summary counts as slow: a page load past the cache
    draws the last one at once, says how old it is, and the next load draws the new one. Off
    (``inf``), a load waits for a summary of now, as before."""
    import streamlit as st

    from fleetscope.dashboard import data, timerange

    engine, now = fleet_engine
    monkeypatch.setenv("FLEETSCOPE_DASHBOARD_SERVE_LAST_AFTER", serve_last_after)
    st.cache_resource.clear()
    st.cache_data.clear()
    real_now = timerange.now_ns
    minute_ago = real_now() - 60 * NS
    first_load = [True]  # whose "now" is a minute ago
    monkeypatch.setattr(timerange, "now_ns", lambda: minute_ago if first_load[0] else real_now())

    at = app(db_url, "fleet").run()
    first_load[0] = False
    no_errors(at)
    assert f"{DEVICES} devices ·" in _caption(at) and _read_ago_s(at) >= 55
    with engine.begin() as conn:  # a device registers
        conn.execute(insert(Device.__table__), [{
            "id": DEVICES + 2, "agent_id": "agent-new", "name": "dev-new", "hostname": "dev-new", "kind": "server",
            "labels": {}, "first_seen_ns": now, "last_seen_ns": now, "inventory": {"gpus": []}}])  # fmt: skip

    at.run()
    no_errors(at)
    if serve_last_after == "0":
        assert f"{DEVICES} devices ·" in _caption(at) and _read_ago_s(at) >= 55, "the last summary, its age shown"
        data._fleet_answers().wait_for_refresh(("fleet", query.normalise_url(db_url)), 30)
        at.run()
        no_errors(at)
    assert f"{DEVICES + 1} devices ·" in _caption(at), "the summary of now"
    assert _read_ago_s(at) is None, _caption(at)
    st.cache_resource.clear()
