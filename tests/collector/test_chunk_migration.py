"""Revision 0006 (the chunk tables): going back to 0005 puts every folded row back into the
sample tables, bit for bit, and upgrading again works."""

from __future__ import annotations

from sqlalchemy import Engine, inspect, text

from fleetscope.collector.jobs.compaction import CompactionJob
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.engine import make_engine
from tests.collector.test_compaction import NOW, fill, tail_and_chunked


def sample_rows(engine: Engine) -> dict[str, list]:
    with engine.connect() as conn:
        return {t: sorted(tuple(r) for r in conn.execute(text(f"SELECT * FROM {t}")).all())  # noqa: S608
                for t in ("gpu_samples", "host_samples")}


def test_downgrade_below_0006_unfolds_every_chunk_and_upgrade_works_again(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        fill(engine)
        RollupJob(engine, owner="r").run_once(now_ns=NOW)
        before = sample_rows(engine)
        assert CompactionJob(engine, owner="c").run_once(now_ns=NOW).rows > 0
        assert tail_and_chunked(engine)["gpu_chunks"] > 0
        migrations.downgrade(engine, "0005")
        assert not inspect(engine).has_table("gpu_chunks") and not inspect(engine).has_table("host_chunks")
        assert sample_rows(engine) == before
        assert migrations.upgrade(engine).after == migrations.head()
        assert tail_and_chunked(engine)["gpu_chunks"] == 0
        assert sample_rows(engine) == before
    finally:
        engine.dispose()
