"""chunks: compacted raw samples, many rows of one device (and GPU) in one encoded row

Revision ID: 0006
Revises: 0005

``gpu_chunks`` and ``host_chunks`` hold rows of ``gpu_samples`` / ``host_samples`` that the
compaction job (``fleetscope.collector.jobs.compaction``) folded out of those tables: one row per
device (and GPU) and time range, ``data`` encoded by ``fleetscope.collector.storage.chunk_codec``
(format ``codec``). The upgrade only creates the tables: nothing is folded until a collector's
compaction job runs. The downgrade first puts every folded row back into the sample tables, so
going back to 0005 loses nothing. The tables are written out here rather than taken from
``schema.py``.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, SmallInteger, column, select, table

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_chunks",
        Column("device_id", Integer, nullable=False),
        Column("gpu_index", SmallInteger, nullable=False),
        Column("start_ns", BigInteger, nullable=False),
        Column("end_ns", BigInteger, nullable=False),
        Column("rows", Integer, nullable=False),
        Column("codec", SmallInteger, nullable=False),
        Column("data", LargeBinary, nullable=False),
        Index("gpu_chunks_device_start", "device_id", "gpu_index", "start_ns"),
        Index("gpu_chunks_start", "start_ns"),
    )
    op.create_table(
        "host_chunks",
        Column("device_id", Integer, nullable=False),
        Column("start_ns", BigInteger, nullable=False),
        Column("end_ns", BigInteger, nullable=False),
        Column("rows", Integer, nullable=False),
        Column("codec", SmallInteger, nullable=False),
        Column("data", LargeBinary, nullable=False),
        Index("host_chunks_device_start", "device_id", "start_ns"),
        Index("host_chunks_start", "start_ns"),
    )


def _unfold(chunks: str, samples: str, per_gpu: bool) -> None:
    """Every row of every chunk back into its sample table, a chunk at a time."""
    import numpy as np

    from fleetscope.collector.storage.chunk_codec import decode_chunk

    conn = op.get_bind()
    keys = ["device_id", "gpu_index"] if per_gpu else ["device_id"]
    source = table(chunks, *[column(k) for k in keys], column("start_ns"), column("data"))
    for row in conn.execute(select(source).order_by(*[source.c[k] for k in keys], source.c.start_ns)).all():
        ts, values, texts = decode_chunk(bytes(row.data))
        names = [*values, *texts]
        target = table(samples, *[column(k) for k in keys], column("ts_ns"), *[column(name) for name in names])
        fixed = {k: getattr(row, k) for k in keys}
        batch = []
        for i in range(len(ts)):
            r = dict(fixed, ts_ns=int(ts[i]))
            for name, arr in values.items():
                v = float(arr[i])
                r[name] = None if np.isnan(v) else v
            for name, strings in texts.items():
                r[name] = strings[i]
            batch.append(r)
        if batch:
            conn.execute(target.insert(), batch)
    conn.execute(source.delete())


def downgrade() -> None:
    _unfold("gpu_chunks", "gpu_samples", per_gpu=True)
    _unfold("host_chunks", "host_samples", per_gpu=False)
    op.drop_table("host_chunks")
    op.drop_table("gpu_chunks")
