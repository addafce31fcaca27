"""The dashboard's questions against PostgreSQL's planner: the statements the query API really
runs (captured as they execute) are EXPLAINed on a database with enough rows that a table
without a fitting index would be read whole, and the plans must use an index and read only the
partitions of the window asked for.

Questions: the fleet overview, latest readings, a device's 24 h chart, and incidents in a range."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from fleetscope.collector.query import device_series, fleet_overview, latest_readings, search_incidents
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.partitions import day_start_ns, ensure_partitions_ahead, partition_name
from fleetscope.collector.storage.registry import register_device
from fleetscope.proto import vocabulary
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.latest_rows import refresh_latest

NS = 10**9
DAY = 86_400 * NS
DEVICES = 40
DAYS = 4
NOW = day_start_ns(1_796_300_000 * NS) + 12 * 3600 * NS  # noon, the 4th day of data
FIRST_DAY = day_start_ns(NOW) - (DAYS - 1) * DAY
STEP_S = 30  # one sample per device every 30 s: 460,800 GPU rows and as many host rows


@pytest.fixture(scope="module")
def big_pg() -> Iterator[Engine]:
    import secrets

    from tests.conftest import PG_ADMIN_URL, _pg_admin

    admin = _pg_admin()
    name = "fleetscope_explain_" + secrets.token_hex(4)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    engine = make_engine(url)
    try:
        for i in range(DEVICES):
            req = pb.RegisterRequest(agent_id=f"id-{i}", boot_id="boot", name=f"dev-{i:02d}", sent_ns=NOW)
            register_device(engine, req, received_ns=NOW)
        ensure_partitions_ahead(engine, FIRST_DAY, days_ahead=DAYS)
        n = DAYS * 86_400 // STEP_S
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO gpu_samples (device_id, ts_ns, gpu_index, util_gpu_percent, temp_c, memory_used_bytes, power_w)"
                " SELECT d.id, :t0 + s * :step, 0, (s % 100), 50 + (s % 30), 1e9, 200 FROM devices d, generate_series(0, :n - 1) s"
            ), {"t0": FIRST_DAY, "step": STEP_S * NS, "n": n})
            conn.execute(text(
                "INSERT INTO host_samples (device_id, ts_ns, cpu_percent, mem_used_bytes, mem_total_bytes)"
                " SELECT d.id, :t0 + s * :step, (s % 100), 1e9, 4e9 FROM devices d, generate_series(0, :n - 1) s"
            ), {"t0": FIRST_DAY, "step": STEP_S * NS, "n": n})
            conn.execute(text(
                "INSERT INTO incidents (device_id, ts_ns, received_ns, kind, severity, title, facts, source, excerpt, context,"
                " process_name, group_key, state, origin, count, last_seen_ns, updated_ns, hints)"
                " SELECT 1 + s % :devices, :t0 + s * :gap, :t0, CASE WHEN s % 3 = 0 THEN :oom ELSE :xid END, 'error', 't',"
                " '{}', '', '', '{}', '', '', 'resolved', 'agent', 1, :t0 + s * :gap, :t0, '[]' FROM generate_series(0, 49999) s"
            ), {"devices": DEVICES, "t0": FIRST_DAY, "gap": DAYS * DAY // 50_000, "oom": vocabulary.KIND_CUDA_OOM,
                "xid": vocabulary.KIND_GPU_XID})
            refresh_latest(conn)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
        yield engine
    finally:
        engine.dispose()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def plans_of(engine: Engine, ask: Callable[[Session], object], tables: tuple[str, ...]) -> list[tuple[str, str]]:
    """Run ``ask``, capture every statement it sends, and EXPLAIN those that read ``tables``."""
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with Session(engine) as session:
            ask(session)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    plans = []
    pattern = re.compile(r"\b(" + "|".join(tables) + r")\b")
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        for statement, params in captured:
            if pattern.search(statement):
                cur.execute("EXPLAIN " + statement, params)
                plans.append((statement, "\n".join(r[0] for r in cur.fetchall())))
        raw.rollback()
    finally:
        raw.close()
    assert plans, f"no statement read {tables}"
    return plans


def _no_full_read(plans: list[tuple[str, str]], table: str) -> None:
    for statement, plan in plans:
        full = re.findall(rf"Seq Scan on ({table}\w*)", plan)
        # An empty default partition may be scanned (nothing to read); a day's partition may not.
        full = [f for f in full if not f.endswith("_default")]
        assert not full, f"{table} read whole ({full}) by:\n{statement}\n{plan}"


def test_a_devices_24h_chart_reads_its_two_days_partitions_by_index(big_pg: Engine) -> None:
    since, until = NOW - DAY, NOW
    plans = plans_of(big_pg, lambda s: device_series(session=s, device="dev-07", since_ns=since, until_ns=until),
                     ("gpu_samples", "host_samples"))
    wanted = {partition_name(t, day_start_ns(ts)) for t in ("gpu_samples", "host_samples") for ts in (since, until - 1)}
    for statement, plan in plans:
        touched = set(re.findall(r"\b((?:gpu|host)_samples_p\d{8})\b", plan))
        assert touched and touched <= wanted, f"partitions outside the window in:\n{statement}\n{plan}"
        assert "Index" in plan, f"no index used by:\n{statement}\n{plan}"
    _no_full_read(plans, "gpu_samples")
    _no_full_read(plans, "host_samples")


def test_latest_readings_and_the_fleet_overview_never_read_a_sample_table_whole(big_pg: Engine) -> None:
    with Session(big_pg) as s:
        latest = latest_readings(session=s, now_ns=NOW)
        assert len(latest.gpus) == len(latest.hosts) == DEVICES
    # "Now" is the latest tables' rows: latest_readings reads no sample table at all.
    plans = plans_of(big_pg, lambda s: latest_readings(session=s, now_ns=NOW), ("gpu_latest", "host_latest"))
    assert not [st for st, _ in plans if re.search(r"\b(gpu|host)_samples\b", st)]
    for ask in (lambda s: latest_readings(session=s, now_ns=NOW), lambda s: fleet_overview(session=s, now_ns=NOW)):
        plans = plans_of(big_pg, ask, ("gpu_samples", "host_samples", "gpu_latest", "host_latest"))
        for _statement, plan in plans:
            touched = set(re.findall(r"\b((?:gpu|host)_samples_p\d{8})\b", plan))
            assert partition_name("gpu_samples", FIRST_DAY) not in touched or "Index" in plan, plan
        _no_full_read(plans, "gpu_samples")
        _no_full_read(plans, "host_samples")


def test_incidents_in_a_range_are_found_by_index(big_pg: Engine) -> None:
    plans = plans_of(big_pg, lambda s: search_incidents(session=s, since_ns=NOW - 3600 * NS, until_ns=NOW,
                                                        kinds=[vocabulary.KIND_CUDA_OOM]), ("incidents",))
    _no_full_read(plans, "incidents")
    assert any("Index" in plan for _, plan in plans)
    plans = plans_of(big_pg, lambda s: search_incidents(session=s, since_ns=NOW - 3600 * NS, until_ns=NOW), ("incidents",))
    _no_full_read(plans, "incidents")
