"""fleetscope on a real Citus cluster (a coordinator and two workers on loopback,
``tests/citus_cluster.py``): ``db upgrade`` spreads the schema by device, a batch and its claim
are stored once on the worker of its device, and plain PostgreSQL is left as it was.

With ``FLEETSCOPE_REQUIRE_CITUS=1`` (CI) the ``db_url`` tests of the modules in
``tests/conftest.py``'s ``CITUS_MODULES`` run on Citus too; ``FLEETSCOPE_TEST_CITUS_ALL=1`` runs
every ``db_url`` test there (issue 30)."""

from __future__ import annotations

import time

from sqlalchemy import text

from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.citus import DISTRIBUTED, LOCAL, REFERENCE, citus_state
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import metadata
from fleetscope.collector.storage.writer import BatchWriter
from tests.collector.test_storage import _item, _register


def test_every_table_is_distributed_by_device_copied_or_kept_on_the_coordinator() -> None:
    placed = [*DISTRIBUTED, *REFERENCE, *LOCAL]
    assert len(placed) == len(set(placed)), "a table is placed once"
    assert set(metadata.tables) <= set(placed), f"tables Citus would not spread: {set(metadata.tables) - set(placed)}"
    for name in DISTRIBUTED:
        assert "device_id" in metadata.tables[name].c, f"{name} has no device_id to be distributed by"


def test_db_upgrade_on_citus_distributes_the_schema_once(citus_url: str) -> None:
    engine = make_engine(citus_url, create=False)
    try:
        report = migrations.upgrade(engine)
        assert report.after == migrations.head()
        assert {line.split(":")[0] for line in report.distributed} == set(DISTRIBUTED) | set(REFERENCE)
        assert any(line.startswith("citus: ") for line in report.lines())
        with engine.connect() as conn:
            state = citus_state(conn)
            colocated = conn.execute(text(
                "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'")).scalar()
        assert state.workers == 2
        assert state.distributed == set(DISTRIBUTED) and state.reference == set(REFERENCE)
        assert colocated == 1, "every device table in the same shards"
        again = migrations.upgrade(engine)
        assert again.steps == () and again.distributed == (), "a second upgrade has nothing to do"
    finally:
        engine.dispose()


def test_a_batch_and_its_claim_are_stored_once_on_its_devices_worker(citus_url: str) -> None:
    engine = make_engine(citus_url)  # a collector's start-up upgrade: migrated and distributed
    writer = BatchWriter(engine)
    writer.start()
    try:
        device_id = _register(engine)
        now = time.time_ns()
        first = writer.submit(_item(device_id, 1, now)).result(30)
        again = writer.submit(_item(device_id, 1, now)).result(30)
        assert (first.duplicate, again.duplicate) == (False, True)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT sum(rows) FROM gpu_chunks WHERE device_id = :d"), {"d": device_id}).scalar()
            latest = conn.execute(text("SELECT count(*) FROM gpu_latest WHERE device_id = :d"), {"d": device_id}).scalar()
            claims = conn.execute(text("SELECT device_id FROM ingested_batches")).scalars().all()
            shards = conn.execute(text(
                "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid IN ("
                " get_shard_id_for_distribution_column('gpu_chunks', :d),"
                " get_shard_id_for_distribution_column('gpu_latest', :d),"
                " get_shard_id_for_distribution_column('ingested_batches', :d))"
            ), {"d": device_id}).scalars().all()
        assert rows == 1 and latest == 1 and claims == [device_id]
        assert len(shards) == 3 and len(set(shards)) == 1, "the claim sits on the same worker as the batch's chunk and latest row"
    finally:
        writer.stop()
        engine.dispose()


def test_plain_postgresql_is_not_distributed(pg_url: str) -> None:
    engine = make_engine(pg_url, create=False)
    try:
        report = migrations.upgrade(engine)
        assert report.distributed == ()
        with engine.connect() as conn:
            assert not citus_state(conn).installed
            key = conn.execute(text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'incidents_pkey'")).scalar()
        assert key == "PRIMARY KEY (id)"
    finally:
        engine.dispose()
