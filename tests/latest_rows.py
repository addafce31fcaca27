"""Test helpers for the latest tables (``gpu_latest``, ``host_latest``, revision 0011).

``refresh_latest(conn)``: tests that set up "now" by inserting rows into the tail tables
(``gpu_samples`` / ``host_samples``) call it afterwards, so the latest tables hold what the
writer (or migration 0011, for rows written the old way) would have put there: each device's
(and GPU's) newest tail row, over an older latest row only.

``store_chunk(conn, kind, device_id, rows)``: stores rows the way the writer does since revision
0011, as one chunk (a multi-GPU chunk for "gpu": ``gpu_index`` -1 and a ``gpu_index`` value
column) plus the upsert of the newest row per device (and GPU) into the latest table when it is
newer than what is there. Nothing goes to the tail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import and_, delete, insert, select, text

from fleetscope.collector.storage.chunk_codec import CODEC_VERSION, encode_chunk
from fleetscope.collector.storage.chunk_reader import HOST_TEXT_COLUMNS, MIXED_GPU_COLUMN, MIXED_GPUS
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    gpu_chunks,
    gpu_latest,
    host_chunks,
    host_latest,
)

_TABLES = (
    ("gpu_latest", "gpu_samples", ("device_id", "gpu_index")),
    ("host_latest", "host_samples", ("device_id",)),
)


def refresh_latest(conn: Any) -> None:
    """Upsert each device's (and GPU's) newest tail row into the latest tables, over an older
    row only (as migration 0011 fills them, and as the writer keeps them). ``conn``: a
    SQLAlchemy Connection or Session, in a transaction the caller commits."""
    for latest, tail, key in _TABLES:
        table = gpu_latest if latest == "gpu_latest" else host_latest
        cols = [c.name for c in table.columns]
        group = ", ".join(key)
        newest = f"SELECT {group}, max(ts_ns) AS newest FROM {tail} GROUP BY {group}"
        older = " AND ".join(f"n.{k} = {latest}.{k}" for k in key)
        conn.execute(
            text(
                f"DELETE FROM {latest} WHERE EXISTS (SELECT 1 FROM ({newest}) n WHERE {older} AND n.newest > {latest}.ts_ns)"
            )
        )
        on = " AND ".join(f"s.{k} = n.{k}" for k in key)
        conn.execute(text(
            f"INSERT INTO {latest} ({', '.join(cols)}) SELECT {', '.join('s.' + c for c in cols)} FROM {tail} s"
            f" JOIN ({newest}) n ON {on} AND s.ts_ns = n.newest WHERE true ON CONFLICT DO NOTHING"
        ))  # fmt: skip


def upsert_latest(conn: Any, kind: str, row: Mapping[str, Any]) -> bool:
    """Put one row (``device_id``, ``ts_ns``, [``gpu_index``], readings) into the kind's latest
    table unless the row there is as new or newer; True when it went in."""
    table = gpu_latest if kind == "gpu" else host_latest
    c = table.c
    key = [c.device_id == row["device_id"]] + ([c.gpu_index == row["gpu_index"]] if kind == "gpu" else [])
    have = conn.execute(select(c.ts_ns).where(and_(*key))).scalar()
    if have is not None and int(have) >= int(row["ts_ns"]):
        return False
    conn.execute(delete(table).where(and_(*key)))
    conn.execute(insert(table).values({k: v for k, v in row.items() if k in c}))
    return True


def store_chunk(conn: Any, kind: str, device_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """Store rows (``ts_ns``, [``gpu_index``], any readings; missing ones NULL) of one device as
    the writer does since revision 0011: one chunk, and the newest row per GPU (or the host's)
    upserted into the latest table when newer. ``conn`` in a transaction the caller commits."""
    import numpy as np

    rows = sorted(rows, key=lambda r: (r["ts_ns"], r.get("gpu_index", 0)))
    ts = np.array([int(r["ts_ns"]) for r in rows], dtype=np.int64)
    names = GPU_SAMPLE_COLUMNS if kind == "gpu" else HOST_VALUE_COLUMNS
    columns = {n: np.array([np.nan if r.get(n) is None else float(r[n]) for r in rows]) for n in names}
    texts: dict[str, list[str | None]] = {}
    if kind == "gpu":
        columns[MIXED_GPU_COLUMN] = np.array([float(r["gpu_index"]) for r in rows])
        table, extra = gpu_chunks, {"gpu_index": MIXED_GPUS}
    else:
        texts = {n: [r.get(n) for r in rows] for n in HOST_TEXT_COLUMNS}
        table, extra = host_chunks, {}
    conn.execute(insert(table).values(
        device_id=device_id, start_ns=int(ts.min()), end_ns=int(ts.max()), rows=len(rows), codec=CODEC_VERSION,
        data=encode_chunk(ts, columns, texts), **extra,
    ))  # fmt: skip
    newest: dict[Any, Mapping[str, Any]] = {}
    for r in rows:  # in time order: the last of each GPU is its newest
        newest[r.get("gpu_index")] = r
    for r in newest.values():
        upsert_latest(conn, kind, {"device_id": device_id, **r})
