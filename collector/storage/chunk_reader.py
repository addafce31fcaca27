"""Reading compacted raw samples back: the rows of the chunks (``gpu_chunks``, ``host_chunks``)
of some devices within a window, decoded, filtered to the window and sorted, in columns.

The raw readers (``fleetscope.collector.query.samples``) merge these with the tail tables'
rows, so a reader sees the same rows wherever they sit. Chunks of one device may overlap (late
rows folded after their hour was): their rows are simply put together and sorted.

The range condition is ``start_ns < hi AND end_ns >= lo`` with ``start_ns >= lo -
MAX_CHUNK_SPAN_NS`` added, so the (device, GPU, start) index bounds the scan: a chunk must
span less than ``MAX_CHUNK_SPAN_NS`` from its first row to its last (the compaction job writes
at most an hour).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from fleetscope.collector.storage.chunk_codec import decode_chunk
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollups import Source
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    gpu_chunks,
    host_chunks,
)

if TYPE_CHECKING:
    import numpy as np

NS = 10**9
MAX_CHUNK_SPAN_NS = 86_400 * NS
# ``gpu_chunks.gpu_index`` of a chunk that holds several GPUs' rows (a batch as it arrived): the
# GPU of each row is then its value column ``gpu_index`` (``MIXED_GPU_COLUMN``). The compaction
# job splits such chunks into one chunk per GPU when it merges a window.
MIXED_GPUS = -1
MIXED_GPU_COLUMN = "gpu_index"
HOST_TEXT_COLUMNS = ("cpu_cores", "top_processes")


@dataclass
class ChunkRows:
    """Rows in columns, sorted by time (then device, then GPU). ``gpu_index`` is empty for host
    rows. ``values``: float64 with NaN for NULL; ``texts``: str or None."""

    device_id: np.ndarray
    ts_ns: np.ndarray
    gpu_index: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    texts: dict[str, list[str | None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def value(self, name: str, i: int) -> float | None:
        """Row ``i``'s value of a float column as the tail tables give it: None for NULL."""
        v = float(self.values[name][i])
        return None if v != v else v


# Per-batch chunks are read again and again while they are new: each detector reads a device's
# new samples every pass, the Fleet page's charts their right edge. Decoding a small chunk
# (~150 µs) costs more than looking it up, so small ones are kept decoded, read-only, by their
# bytes (a chunk never changes: a merged one is a new blob). Hour chunks are decoded each time.
SMALL_CHUNK_BYTES = 16 << 10
_DECODED_CACHE_SIZE = 512  # at most ~75 MB of decoded server batches; a small fleet's whole window


@functools.lru_cache(maxsize=_DECODED_CACHE_SIZE)
def _decode_cached(data: bytes) -> tuple[Any, dict[str, Any], dict[str, tuple[str | None, ...]]]:
    ts, values, strings = decode_chunk(data)
    ts.flags.writeable = False
    for arr in values.values():
        arr.flags.writeable = False
    return ts, values, {name: tuple(v) for name, v in strings.items()}


def decode_small_chunk(data: bytes) -> tuple[Any, dict[str, Any], Any]:
    """``chunk_codec.decode_chunk``, from a cache for small chunks: the arrays are read-only and
    the text columns tuples (shared by every caller)."""
    if len(data) <= SMALL_CHUNK_BYTES:
        return _decode_cached(data)
    return decode_chunk(data)


def _chunk_query(table: Any, device_ids: Sequence[int], lo: int, hi: int, gpu_index: int | None) -> Any:
    c = table.c
    where = [in_ids(c.device_id, device_ids), c.start_ns < hi, c.end_ns >= lo, c.start_ns >= lo - MAX_CHUNK_SPAN_NS]
    if gpu_index is not None:
        where.append(c.gpu_index.in_([gpu_index, MIXED_GPUS]))
    return where


def read_gpu_chunk_rows(
    conn: Any, device_ids: Sequence[int], lo: int, hi: int, *, gpu_index: int | None = None,
    columns: Sequence[str] = GPU_SAMPLE_COLUMNS,
) -> ChunkRows:
    """GPU rows of the devices' chunks with ``lo <= ts_ns < hi`` (of one GPU when given)."""
    c = gpu_chunks.c
    q = select(c.device_id, c.gpu_index, c.data).where(*_chunk_query(gpu_chunks, device_ids, lo, hi, gpu_index))
    return _decode_rows(conn.execute(q).all(), lo, hi, columns, (), per_gpu=True, gpu_index=gpu_index)


def read_host_chunk_rows(
    conn: Any, device_ids: Sequence[int], lo: int, hi: int, *,
    columns: Sequence[str] = HOST_VALUE_COLUMNS, texts: Sequence[str] = HOST_TEXT_COLUMNS,
) -> ChunkRows:
    """Host rows of the devices' chunks with ``lo <= ts_ns < hi``."""
    c = host_chunks.c
    q = select(c.device_id, c.data).where(*_chunk_query(host_chunks, device_ids, lo, hi, None))
    return _decode_rows(conn.execute(q).all(), lo, hi, columns, texts, per_gpu=False)


def _decode_rows(
    chunks: Sequence[Any], lo: int, hi: int, columns: Sequence[str], texts: Sequence[str], *, per_gpu: bool,
    gpu_index: int | None = None,
) -> ChunkRows:
    import numpy as np

    parts_dev, parts_ts, parts_gpu = [], [], []
    parts_val: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    parts_txt: dict[str, list[str | None]] = {name: [] for name in texts}
    for chunk in chunks:
        ts, values, strings = decode_small_chunk(bytes(chunk.data))
        keep = (ts >= lo) & (ts < hi)
        mixed = per_gpu and int(chunk.gpu_index) == MIXED_GPUS
        if mixed:
            gpus = values[MIXED_GPU_COLUMN].astype(np.int64)
            if gpu_index is not None:
                keep &= gpus == gpu_index
        k = int(keep.sum())
        if not k:
            continue
        parts_ts.append(ts[keep])
        parts_dev.append(np.full(k, int(chunk.device_id), dtype=np.int64))
        if mixed:
            parts_gpu.append(gpus[keep])
        elif per_gpu:
            parts_gpu.append(np.full(k, int(chunk.gpu_index), dtype=np.int64))
        for name in columns:
            got = values.get(name)  # a column added after this chunk was written: NULL
            parts_val[name].append(got[keep] if got is not None else np.full(k, np.nan))
        idx = np.flatnonzero(keep).tolist()
        for name in texts:
            got_t = strings.get(name)
            parts_txt[name].extend([got_t[i] for i in idx] if got_t is not None else [None] * k)
    empty_i = np.empty(0, dtype=np.int64)
    ts_all = np.concatenate(parts_ts) if parts_ts else empty_i
    dev_all = np.concatenate(parts_dev) if parts_dev else empty_i
    gpu_all = np.concatenate(parts_gpu) if parts_gpu else empty_i
    order = np.lexsort((gpu_all, dev_all, ts_all)) if per_gpu else np.lexsort((dev_all, ts_all))
    vals = {name: (np.concatenate(p)[order] if p else np.empty(0)) for name, p in parts_val.items()}
    order_list = order.tolist()
    txts = {name: [p[i] for i in order_list] for name, p in parts_txt.items()}
    return ChunkRows(dev_all[order], ts_all[order], gpu_all[order] if per_gpu else empty_i, vals, txts)


def chunked_row_counts(conn: Any, device_ids: Sequence[int] | None = None) -> dict[str, int]:
    """Rows held in chunks, per table ("host", "gpu"), of all devices or some."""
    out = {}
    for name, table in (("host", host_chunks), ("gpu", gpu_chunks)):
        q = select(func.coalesce(func.sum(table.c.rows), 0))
        if device_ids is not None:
            q = q.where(in_ids(table.c.device_id, device_ids))
        out[name] = int(conn.execute(q).scalar_one())
    return out


def newest_chunked_ns(conn: Any, device_ids: Sequence[int]) -> int | None:
    """The time of the newest row held in the devices' chunks; None: no chunk."""
    best: int | None = None
    for table in (host_chunks, gpu_chunks):
        v = conn.execute(select(func.max(table.c.end_ns)).where(in_ids(table.c.device_id, device_ids))).scalar()
        if v is not None:
            best = int(v) if best is None else max(best, int(v))
    return best


def chunk_buckets(
    conn: Any, source: Source, device_ids: Sequence[int], lo: int, hi: int, step_s: int | None, per_gpu: bool,
) -> list[tuple[tuple[int, int | None, int], int, int, dict[str, float | None]]]:
    """The devices' chunk rows in [lo, hi) aggregated like ``rollups.raw_aggregates`` does in SQL:
    ``((device_id, gpu_index or None, bucket_ns), n, span_ns, {aggregate: value})`` per device
    (and GPU when ``per_gpu``) and bucket of ``step_s`` (one bucket 0 for the window when None).
    ``source.aggs`` says which aggregates."""
    import numpy as np

    needed = sorted({a.raw for a in source.aggs})
    if source.per_gpu:
        rows = read_gpu_chunk_rows(conn, device_ids, lo, hi, columns=needed)
    else:
        rows = read_host_chunk_rows(conn, device_ids, lo, hi, columns=needed, texts=())
    if not len(rows):
        return []
    bucket = rows.ts_ns - rows.ts_ns % (step_s * NS) if step_s else np.zeros(len(rows), dtype=np.int64)
    gpu = rows.gpu_index if (per_gpu and source.per_gpu) else np.full(len(rows), -1, dtype=np.int64)
    keys = np.stack([rows.device_id, gpu, bucket], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(len(unique)))
    ends = np.append(starts[1:], len(order))
    out = []
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        sel = order[s:e]
        ts = rows.ts_ns[sel]
        vals: dict[str, float | None] = {}
        for a in source.aggs:
            v = rows.values[a.raw][sel]
            v = v[~np.isnan(v)]
            if not v.size:
                vals[a.name] = 0 if a.how == "count_if" else None
            elif a.how == "avg":
                vals[a.name] = float(v.mean())
            elif a.how == "max":
                vals[a.name] = float(v.max())
            elif a.how == "min":
                vals[a.name] = float(v.min())
            elif a.how == "delta":
                vals[a.name] = float(v.max() - v.min())
            elif a.how == "count_if":
                vals[a.name] = int(np.count_nonzero(v.astype(np.int64) & a.mask))
            else:  # pragma: no cover - rollups' definitions are the only ones
                raise ValueError(a.how)
        d, g, b = (int(x) for x in unique[k])
        out.append(((d, g if g >= 0 else None, b), int(sel.size), int(ts.max() - ts.min()), vals))
    return out


def take_rows(rows: ChunkRows, keep: np.ndarray) -> ChunkRows:
    """The rows of ``rows`` where ``keep`` (a boolean array) is true, in the same order."""
    import numpy as np

    idx = np.flatnonzero(keep)
    at = idx.tolist()
    return ChunkRows(
        rows.device_id[idx],
        rows.ts_ns[idx],
        rows.gpu_index[idx] if len(rows.gpu_index) else rows.gpu_index,
        {name: v[idx] for name, v in rows.values.items()},
        {name: [t[i] for i in at] for name, t in rows.texts.items()},
    )


def _carrying(rows: ChunkRows, present: Sequence[str]) -> np.ndarray:
    """Which rows carry every reading of ``present`` (not NULL)."""
    import numpy as np

    keep = np.ones(len(rows), dtype=bool)
    for name in present:
        if name in rows.texts:
            keep &= np.fromiter((t is not None for t in rows.texts[name]), dtype=bool, count=len(rows))
        else:
            keep &= ~np.isnan(rows.values[name])
    return keep


def read_samples(
    conn: Any, kind: str, device_ids: Sequence[int], lo: int, hi: int, *,
    columns: Sequence[str] | None = None, texts: Sequence[str] = (), gpu_index: int | None = None,
    present: Sequence[str] = (),
) -> ChunkRows:
    """The devices' raw samples with ``lo <= ts_ns < hi`` wherever they sit: in chunks (what the
    collector stores since revision 0011, and what compaction folded) and in the tail tables
    (rows an older collector wrote, not yet folded), merged and sorted by time, then device,
    then GPU. ``kind`` is "gpu" or "host"; ``columns`` default to all of the kind's readings,
    ``texts`` (host only) to none. ``present``: only the samples that carry each of these
    readings (some of ``columns`` and ``texts``); for the tail's rows the condition is the
    database's, so a reading most samples lack (the host's top-process table) does not fetch
    every row of the window; chunks are decoded whole and filtered."""
    import numpy as np

    from fleetscope.collector.storage.schema import gpu_samples, host_samples

    per_gpu = kind == "gpu"
    if per_gpu:
        cols = tuple(GPU_SAMPLE_COLUMNS if columns is None else columns)
        chunked = read_gpu_chunk_rows(conn, device_ids, lo, hi, gpu_index=gpu_index, columns=cols)
        table = gpu_samples
    elif kind == "host":
        cols = tuple(HOST_VALUE_COLUMNS if columns is None else columns)
        chunked = read_host_chunk_rows(conn, device_ids, lo, hi, columns=cols, texts=texts)
        table = host_samples
    else:
        raise ValueError(f"kind must be 'gpu' or 'host', not {kind!r}")
    if not set(present) <= {*cols, *texts}:
        raise ValueError(f"present {list(present)}: not among the columns read")
    if present and len(chunked):
        chunked = take_rows(chunked, _carrying(chunked, present))
    c = table.c
    head = [c.device_id, c.ts_ns] + ([c.gpu_index] if per_gpu else [])
    where = [in_ids(c.device_id, device_ids), c.ts_ns >= lo, c.ts_ns < hi, *[c[n].is_not(None) for n in present]]
    if per_gpu and gpu_index is not None:
        where.append(c.gpu_index == gpu_index)
    tail = conn.execute(select(*head, *[c[n] for n in cols], *[c[n] for n in texts]).where(*where)).all()
    if not tail:
        return chunked
    by_column = list(zip(*tail))  # column by column: None becomes NaN in a float64 array
    width = len(head)
    empty = np.empty(0, dtype=np.int64)
    dev = np.concatenate([chunked.device_id, np.array(by_column[0], dtype=np.int64)])
    ts = np.concatenate([chunked.ts_ns, np.array(by_column[1], dtype=np.int64)])
    gpu = np.concatenate([chunked.gpu_index, np.array(by_column[2], dtype=np.int64)]) if per_gpu else empty
    order = np.lexsort((gpu, dev, ts)) if per_gpu else np.lexsort((dev, ts))
    values = {
        name: np.concatenate([chunked.values[name], np.array(by_column[width + j], dtype=np.float64)])[order]
        for j, name in enumerate(cols)
    }
    at = order.tolist()
    strings = {}
    for j, name in enumerate(texts):
        both = [*chunked.texts[name], *by_column[width + len(cols) + j]]
        strings[name] = [both[i] for i in at]
    return ChunkRows(dev[order], ts[order], gpu[order] if per_gpu else empty, values, strings)
