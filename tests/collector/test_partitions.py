"""PostgreSQL partitioning (storage.partitions, revision 0007) against a real server, and that
SQLite keeps the same tables plain: partitions ahead, rows in the right partition, the default
partition catching what no day takes (and giving it up when its day is created), drops, COPY
ingest into the partitioned tables, and the migration up and down with data."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import inspect, text

from fleetscope.agent.daemon.batcher import Pending, build_batches
from fleetscope.agent.records import GpuSample, HostSample
from fleetscope.collector.ingest.validation import Limits, validate_batch
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.partitions import (
    DAY_S,
    NS,
    PARTITIONED,
    day_start_ns,
    drop_partitions_before,
    ensure_partitions_ahead,
    is_partitioned,
    partition_name,
    partitions_of,
)
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.writer import BatchWriter, WriteItem
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until

DAY = DAY_S * NS
NOW = 1_796_300_000 * NS  # 2026-12-03 (UTC), fixed so partition names are known
TODAY = day_start_ns(NOW)


def _where(conn, table: str, ts_ns: int) -> str:  # type: ignore[no-untyped-def]
    return str(conn.execute(text(f"SELECT tableoid::regclass::text FROM {table} WHERE ts_ns = :t"), {"t": ts_ns}).scalar())


def _gpu_row(conn, device_id: int, ts_ns: int, value: float = 1.0) -> None:  # type: ignore[no-untyped-def]
    conn.execute(text("INSERT INTO gpu_samples (device_id, ts_ns, gpu_index, temp_c) VALUES (:d, :t, 0, :v)"),
                 {"d": device_id, "t": ts_ns, "v": value})


def test_a_new_postgresql_database_has_every_time_series_table_partitioned(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            for table in PARTITIONED:
                assert is_partitioned(conn, table), table
                assert [p.name for p in partitions_of(conn, table)] == [f"{table}_default"]
            assert not is_partitioned(conn, "gpu_state") and not is_partitioned(conn, "devices")
            # The dashboard's indexes are on the parent, so every partition has them.
            assert {i["name"] for i in inspect(conn).get_indexes("gpu_samples")} == {"gpu_samples_device_ts"}
    finally:
        engine.dispose()


def test_sqlite_keeps_the_same_tables_plain_and_partition_calls_are_no_ops(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        assert ensure_partitions_ahead(engine, NOW) == []
        with engine.begin() as conn:
            assert not is_partitioned(conn, "gpu_samples")
            _gpu_row(conn, 1, NOW - 30 * DAY)
            assert drop_partitions_before(conn, "gpu_samples", NOW) == 0
            assert conn.execute(text("SELECT count(*) FROM gpu_samples")).scalar() == 1
    finally:
        engine.dispose()


def test_partitions_ahead_are_created_once_even_by_collectors_at_once(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        results: list[list[str]] = []
        errors: list[BaseException] = []

        def one() -> None:
            try:
                results.append(ensure_partitions_ahead(engine, NOW, days_ahead=2))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        created = sorted(n for r in results for n in r)
        expected = sorted(partition_name(t, TODAY + d * DAY) for t in PARTITIONED for d in range(3))
        assert created == expected, "each partition made exactly once across the four"
        assert partition_name("gpu_samples", TODAY) == "gpu_samples_p20261203"
        assert ensure_partitions_ahead(engine, NOW, days_ahead=2) == []
        with engine.connect() as conn:
            bounds = [(p.start_ns, p.end_ns) for p in partitions_of(conn, "gpu_samples") if not p.is_default]
        assert bounds == [(TODAY + d * DAY, TODAY + (d + 1) * DAY) for d in range(3)]
    finally:
        engine.dispose()


def test_rows_land_in_their_day_and_the_default_partition_takes_the_rest_until_its_day_exists(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        ensure_partitions_ahead(engine, NOW, days_ahead=1)
        future, past = NOW + 400 * DAY, NOW - 40 * DAY
        with engine.begin() as conn:
            for ts in (TODAY, TODAY + DAY - 1, TODAY + DAY, future, future + 1, past):
                _gpu_row(conn, 1, ts)
        with engine.connect() as conn:
            assert _where(conn, "gpu_samples", TODAY) == "gpu_samples_p20261203"
            assert _where(conn, "gpu_samples", TODAY + DAY - 1) == "gpu_samples_p20261203", "the upper bound is exclusive"
            assert _where(conn, "gpu_samples", TODAY + DAY) == "gpu_samples_p20261204"
            assert _where(conn, "gpu_samples", future) == "gpu_samples_default", "a clock far ahead does not break ingest"
            assert _where(conn, "gpu_samples", past) == "gpu_samples_default"
        # The clock reaches that day: its partition is created with the rows the default held.
        created = ensure_partitions_ahead(engine, future, days_ahead=0)
        assert partition_name("gpu_samples", day_start_ns(future)) in created
        with engine.connect() as conn:
            name = partition_name("gpu_samples", day_start_ns(future))
            assert _where(conn, "gpu_samples", future) == name and _where(conn, "gpu_samples", future + 1) == name
            assert _where(conn, "gpu_samples", past) == "gpu_samples_default"
            assert conn.execute(text("SELECT count(*) FROM gpu_samples")).scalar() == 6, "nothing lost or doubled"
    finally:
        engine.dispose()


def test_drop_partitions_before_drops_only_days_wholly_older(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        ensure_partitions_ahead(engine, NOW - 3 * DAY, days_ahead=4)  # 11-30 .. 12-04
        with engine.begin() as conn:
            for d in range(-3, 2):
                _gpu_row(conn, 1, TODAY + d * DAY + 5)
            _gpu_row(conn, 1, NOW - 100 * DAY)  # in the default partition
        with engine.begin() as conn:
            # The cutoff falls inside 12-02: 11-30 and 12-01 end before it, 12-02 straddles it.
            assert drop_partitions_before(conn, "gpu_samples", TODAY - DAY + DAY // 2) == 2
        with engine.connect() as conn:
            left = [p.name for p in partitions_of(conn, "gpu_samples")]
            assert left == ["gpu_samples_p20261202", "gpu_samples_p20261203", "gpu_samples_p20261204", "gpu_samples_default"]
            assert conn.execute(text("SELECT count(*) FROM gpu_samples")).scalar() == 4
    finally:
        engine.dispose()


def _batch_item(device_id: int, seq: int, start_ns: int, rows: int) -> WriteItem:
    pending = Pending(
        host=[HostSample(ts_ns=start_ns + i * NS, cpu_percent=float(i)) for i in range(rows)],
        gpu=[GpuSample(ts_ns=start_ns + i * NS, gpu_index=0, temp_c=50.0, energy_j=float(seq * 1000 + i)) for i in range(rows)],
    )
    batch = pb.Batch(agent_id="id-part", boot_id="boot", seq=seq, created_ns=start_ns, sent_ns=start_ns)
    for bb in build_batches(pending, now_ns=start_ns):
        batch.MergeFrom(bb.batch)
    batch.seq = seq
    return WriteItem(batch=batch, device_id=device_id, agent_id="id-part", boot_id="boot", seq=seq, received_ns=start_ns,
                     correction_ns=0, clock_skew_ns=0, decoded=validate_batch(batch, Limits()))


def test_copy_ingest_fills_the_partitions_exactly_once(pg_url: str) -> None:
    engine = make_engine(pg_url)
    now = time.time_ns()
    ensure_partitions_ahead(engine, now, days_ahead=1)
    device_id = register_device(engine, pb.RegisterRequest(agent_id="id-part", boot_id="boot", name="part", sent_ns=now),
                                received_ns=now).device_id
    writer = BatchWriter(engine)
    writer.start()
    try:
        # The writer stores a batch as one chunk per kind, in the partition of the day it starts
        # (by start_ns): one batch across midnight starting the day before, which has no partition
        # (the default catches it), and one after midnight, in today's partition.
        start = day_start_ns(now)
        first = writer.submit(_batch_item(device_id, 1, start - 60 * NS, 100)).result(30)
        again = writer.submit(_batch_item(device_id, 1, start - 60 * NS, 100)).result(30)
        second = writer.submit(_batch_item(device_id, 2, start + 60 * NS, 100)).result(30)
        assert first.rows == 200 and again.duplicate and second.rows == 200 and not second.duplicate
        with engine.connect() as conn:
            for kind in ("gpu", "host"):
                where = {name: (int(n), int(rows)) for name, n, rows in conn.execute(text(
                    f"SELECT tableoid::regclass::text, count(*), sum(rows) FROM {kind}_chunks GROUP BY 1")).all()}
                assert where == {f"{kind}_chunks_default": (1, 100), partition_name(f"{kind}_chunks", start): (1, 100)}, kind
            gpu = read_samples(conn, "gpu", [device_id], 0, 2**63 - 1, columns=("energy_j",))
            host = read_samples(conn, "host", [device_id], 0, 2**63 - 1, columns=())
        assert sorted(gpu.values["energy_j"].tolist()) == [float(s * 1000 + i) for s in (1, 2) for i in range(100)], \
            "every sample once"
        assert len(host) == len(set(host.ts_ns.tolist())) == 200
    finally:
        writer.stop()
        engine.dispose()


def _fill_at(url: str, revision: str) -> dict[str, int]:
    """A database at ``revision`` with rows over three days in every time-series table."""
    engine = make_engine(url, create=False)
    try:
        migrations.upgrade(engine, revision)
        with engine.begin() as conn:
            for d in range(3):
                ts = NOW - d * DAY
                _gpu_row(conn, 1, ts, float(d))
                conn.execute(text("INSERT INTO host_samples (device_id, ts_ns, cpu_percent) VALUES (1, :t, 5)"), {"t": ts})
                conn.execute(text("INSERT INTO metric_points VALUES (1, :t, 'm', 1.0, '{}')"), {"t": ts})
                conn.execute(text("INSERT INTO log_events VALUES (1, :t, 'f', 'info', 'hello')"), {"t": ts})
                conn.execute(text("INSERT INTO gpu_chunks VALUES (1, 0, :t, :t, 1, 1, :b)"), {"t": ts, "b": b"x"})
        with engine.connect() as conn:
            return {t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
                    for t in ("gpu_samples", "host_samples", "metric_points", "log_events", "gpu_chunks")}
    finally:
        engine.dispose()


def test_migration_0007_partitions_existing_rows_and_downgrade_gives_them_back(db_url: str) -> None:
    counts = _fill_at(db_url, "0006")
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            before = sorted(conn.execute(text("SELECT ts_ns, temp_c FROM gpu_samples")).all())
            indexes_before = sorted(i["name"] for i in inspect(conn).get_indexes("gpu_samples"))
        migrations.upgrade(engine, "0007")
        pg = engine.dialect.name == "postgresql"
        with engine.connect() as conn:
            assert sorted(conn.execute(text("SELECT ts_ns, temp_c FROM gpu_samples")).all()) == before
            for t, n in counts.items():
                assert conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() == n, t
                assert is_partitioned(conn, t) == pg
            assert sorted(i["name"] for i in inspect(conn).get_indexes("gpu_samples")) == indexes_before
            assert inspect(conn).has_table("incident_gpu_samples")
            if pg:
                names = [p.name for p in partitions_of(conn, "gpu_samples")]
                assert names == [partition_name("gpu_samples", TODAY - d * DAY) for d in (2, 1, 0)] + ["gpu_samples_default"]
                assert _where(conn, "gpu_samples", NOW) == partition_name("gpu_samples", TODAY)
        migrations.downgrade(engine, "0006")
        with engine.connect() as conn:
            assert sorted(conn.execute(text("SELECT ts_ns, temp_c FROM gpu_samples")).all()) == before
            for t, n in counts.items():
                assert conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() == n, t
                assert not is_partitioned(conn, t)
            assert sorted(i["name"] for i in inspect(conn).get_indexes("gpu_samples")) == indexes_before
            assert not inspect(conn).has_table("incident_gpu_samples")
        assert migrations.upgrade(engine).after == migrations.head()
    finally:
        engine.dispose()


@pytest.mark.parametrize("table", sorted(PARTITIONED))
def test_every_partitioned_table_exists_in_the_schema(table: str) -> None:
    from fleetscope.collector.storage.schema import metadata

    t = metadata.tables[table]
    assert t.dialect_options["postgresql"]["partition_by"] == f"RANGE ({PARTITIONED[table]})"


def test_days_behind_gives_a_spooled_backlog_day_partitions_and_moves_it_out_of_the_default(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:  # a backlog from 3 days back arrived before any partition existed
            for d in (3, 2):
                _gpu_row(conn, 1, NOW - d * DAY)
        created = ensure_partitions_ahead(engine, NOW, days_ahead=0, days_behind=2, tables=["gpu_samples"])
        assert created == [partition_name("gpu_samples", TODAY - d * DAY) for d in (2, 1, 0)]
        with engine.connect() as conn:
            assert _where(conn, "gpu_samples", NOW - 2 * DAY) == "gpu_samples_p20261201"
            assert _where(conn, "gpu_samples", NOW - 3 * DAY) == "gpu_samples_default", "older than the raw tier"
    finally:
        engine.dispose()


def test_a_starting_collector_creates_the_raw_tiers_partitions_and_ahead(pg_url: str, collector_process) -> None:  # type: ignore[no-untyped-def]
    days_at_start = {day_start_ns(time.time_ns())}
    c = collector_process(pg_url, extra_args=("--retention", "raw=3d")).start()
    try:
        days_at_start.add(day_start_ns(time.time_ns()))  # a start across midnight may use either day
        engine = make_engine(pg_url, create=False)

        def starts() -> list[int]:
            with engine.connect() as conn:
                return [p.start_ns for p in partitions_of(conn, "gpu_samples") if not p.is_default]

        try:  # the port is bound first (a busy one is refused before any work), the partitions follow
            wait_until(lambda: any(starts() == [today + d * DAY for d in range(-3, 3)] for today in days_at_start),
                       timeout_s=30, message="3 days of the raw tier, today and 2 ahead")
        finally:
            engine.dispose()
    finally:
        assert c.terminate() == 0
