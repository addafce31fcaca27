"""The compaction job: folds old rows of the raw tail tables (``gpu_samples``, ``host_samples``)
into compressed chunks (``gpu_chunks``, ``host_chunks``; encoding in
``fleetscope.collector.storage.chunk_codec``), about ten times smaller, and merges the small
chunks the collector stores per ingested batch into one chunk per GPU (and host) and hour.

Design, and why:

* **Only what nobody reads raw any more.** A device's rows are folded only below its *fold
  boundary*: the earliest of ``now - fold_after_s`` (default an hour), the device's minute
  rollup progress (``rollup_progress``: the rollup job reads the tail and the chunks in
  separate statements, so rows moved from one to the other while it rolls their minutes could
  be counted twice or not at all) and ``now - keep_raw_s`` (the detectors read raw rows of the
  last ``lookback_s``, 15 minutes). A device never rolled up is not folded. The
  newest rows of a device stay in the tail, so "latest reading" queries and the charts' raw
  right edge never need a chunk. The raw readers (``query.samples``) read both.
* **Whole windows.** Rows are folded by aligned windows of ``chunk_s`` (an hour), and a window
  only once it lies wholly below the boundary, so a chunk normally holds a full hour of one GPU
  (3,600 rows at 1 Hz) and compresses well. Rows that arrive later for a window already folded
  (a drone replaying its spool days later, a clock correction) are folded into another chunk of
  the same window on a later pass: chunks may overlap and readers merge them.
* **Exactly once.** Each window of a device is one transaction: ``DELETE ... RETURNING`` takes
  the window's rows out of the tail (on PostgreSQL inside a CTE whose one result row holds each
  column as a binary array that numpy reads directly: ``take_window``) and the window's chunks
  to merge out of the chunk table (``take_chunks``), the chunks are made from exactly the rows
  returned, and inserted in the same transaction, which also renews the device's
  ``compaction`` share. A row or chunk that an ingest writer commits meanwhile is either
  returned (and folded) or not deleted; a crash rolls back both the deletes and the insert; a
  collector that lost the share has its window rolled back. Nothing is lost or doubled.
* **Small chunks merged.** The collector stores each ingested batch as chunks of its own (a
  minute or two of one host, and of all its GPUs together: ``gpu_index = -1``, each row's GPU
  in the value column ``gpu_index``). Below the same boundary, a window's small chunks are
  merged into one chunk per GPU (and one host chunk) of the window: decoded column by column,
  concatenated, split by GPU, sorted by time and encoded again at the codec's normal level,
  never as rows. The chunks to merge are found on the chunk index (a window with several
  chunks of one GPU, or a chunk of several GPUs), without reading one. A window's biggest
  chunk of a GPU is kept as it is while it holds more rows than that GPU's others together (a
  window merged before, and a few late batches for it since): the late chunks are merged into
  one chunk of their own beside it, and the big one is rewritten only once they catch up with
  it, so a late row never costs a rewrite of its hour. Rows of a merged chunk beyond its
  window's edges (a batch across the hour) go to a chunk of their own window. Merging alone
  hides nothing from the rollup job (it reads chunks in one statement), but a window's
  transaction folds the window's tail rows too, so the one boundary holds for both.
* **One compactor per device at a time**, any number of collectors sharing the devices: the
  ``compaction`` job's shares (``fleetscope.collector.storage.shares``), and SQLite's write
  lock between windows so ingest is never kept waiting for a whole pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, func, insert, not_, or_, select

from fleetscope.collector.storage.chunk_codec import CODEC_VERSION, decode_chunk, encode_chunk
from fleetscope.collector.storage.chunk_reader import (
    HOST_TEXT_COLUMNS,
    MAX_CHUNK_SPAN_NS,
    MIXED_GPU_COLUMN,
    MIXED_GPUS,
)
from fleetscope.collector.storage.lease import LeaseLost, default_owner
from fleetscope.collector.storage.rollups import bucket_of, read_progress
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    gpu_chunks,
    gpu_samples,
    host_chunks,
    host_samples,
)
from fleetscope.collector.storage.shares import JobShares
from fleetscope.collector.storage.write_lock import WriteLock

log = logging.getLogger(__name__)

LEASE_NAME = "compaction"
NS = 10**9
DEFAULT_FOLD_AFTER_S = 3600.0
DEFAULT_KEEP_RAW_S = 900.0  # the detectors' default lookback (DetectorSettings.lookback_s)
# "returning": the deleted rows one tuple each through the driver (any database);
# "arrays" (PostgreSQL): one row of per-column arrays, numbers as raw binary arrays for numpy.
FETCH_METHODS = ("auto", "returning", "arrays")


@dataclass(frozen=True)
class _Kind:
    name: str
    samples: Any
    chunks: Any
    values: Sequence[str]
    texts: Sequence[str]
    per_gpu: bool


GPU = _Kind("gpu", gpu_samples, gpu_chunks, GPU_SAMPLE_COLUMNS, (), True)
HOST = _Kind("host", host_samples, host_chunks, HOST_VALUE_COLUMNS, HOST_TEXT_COLUMNS, False)
KINDS = (GPU, HOST)


@dataclass
class CompactionReport:
    """What one run did."""

    ran: bool
    holder: str
    devices: int = 0
    windows: int = 0
    chunks: int = 0  # chunks written
    rows: int = 0  # rows folded from the tail
    merged_chunks: int = 0  # small chunks read and merged into the chunks written
    merged_rows: int = 0  # the rows they held
    chunk_bytes: int = 0
    seconds: float = 0.0
    shares: frozenset[int] = frozenset()  # the device shares this run folded (``storage.shares``)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


class CompactionJob:
    """Folds every device's old tail rows on a thread (``start``/``stop``) or on demand
    (``run_once``). A collector starts one; several collectors share the devices
    (``storage.shares``), and no device is folded by two at once."""

    def __init__(
        self,
        engine: Engine,
        *,
        owner: str | None = None,
        interval_s: float = 60.0,
        fold_after_s: float = DEFAULT_FOLD_AFTER_S,
        keep_raw_s: float = DEFAULT_KEEP_RAW_S,
        chunk_s: int = 3600,
        lease_s: float = 120.0,
        clock: Callable[[], int] = time.time_ns,
        progress: Callable[[CompactionReport], None] | None = None,
        fetch: str = "auto",
    ) -> None:
        if fold_after_s < 0 or keep_raw_s < 0:
            raise ValueError("fold_after_s and keep_raw_s must be >= 0")
        if fetch not in FETCH_METHODS:
            raise ValueError(f"fetch must be one of {', '.join(FETCH_METHODS)}")
        if not 60 <= chunk_s <= 86_400:
            raise ValueError("chunk_s must be between 60 and 86400")
        self.engine = engine
        self.owner = owner or default_owner()
        self.shares = JobShares(engine, LEASE_NAME, self.owner, ttl_s=lease_s, clock=clock)
        self.interval_s = interval_s
        self.fold_after_ns = int(fold_after_s * NS)
        self.keep_raw_ns = int(keep_raw_s * NS)
        self.chunk_ns = int(chunk_s) * NS
        self._clock = clock
        self._progress = progress
        self.fetch = fetch  # how a window's rows come back; "auto": the fastest the database has
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = WriteLock(engine)
        self.last_report: CompactionReport | None = None

    def release(self) -> None:
        self.shares.release()

    # -- one run ------------------------------------------------------------------------------

    def boundaries(self, conn: Connection, now_ns: int) -> dict[int, int]:
        """Each device's fold boundary: rows older than it may be folded (devices never rolled
        up are left out)."""
        limit = now_ns - max(self.fold_after_ns, self.keep_raw_ns)
        rolled = {d: until for (d, step), until in read_progress(conn).items() if step == 60}
        return {d: min(limit, until) for d, until in rolled.items()}

    def run_once(self, now_ns: int | None = None) -> CompactionReport:
        started = time.monotonic()
        now_ns = self._clock() if now_ns is None else now_ns
        held = self.shares.acquire(now_ns)
        if not held:
            return CompactionReport(
                ran=False, holder=", ".join(sorted(set(self.shares.holders(now_ns).values()))) or "?"
            )
        report = CompactionReport(ran=True, holder=self.owner, shares=held)
        with self.engine.connect() as conn:
            device_ids = list(conn.execute(select(Device.id).order_by(Device.id)).scalars())
            boundaries = self.boundaries(conn, now_ns)
        for device_id in device_ids:
            if self._stop.is_set():
                break
            boundary = boundaries.get(device_id)
            if boundary is None or not self.shares.holds(device_id):
                continue
            try:
                for kind in KINDS:
                    self._fold_device(kind, device_id, boundary, now_ns, report)
            except LeaseLost:
                log.info("compaction share of device %d lost; leaving it to its new holder", device_id)
                self.shares.lost(device_id)
                continue
            report.devices += 1
            report.seconds = time.monotonic() - started
            if self._progress is not None:
                self._progress(report)
        report.seconds = time.monotonic() - started
        self.last_report = report
        if report.rows or report.merged_chunks:
            log.info(
                "compaction: %d rows of %d devices and %d small chunks (%d rows) into %d chunks (%d bytes) "
                "in %.1f s",
                report.rows,
                report.devices,
                report.merged_chunks,
                report.merged_rows,
                report.chunks,
                report.chunk_bytes,
                report.seconds,
            )
        return report

    def _fold_device(
        self, kind: _Kind, device_id: int, boundary: int, now_ns: int, report: CompactionReport
    ) -> None:
        """Fold the device's windows that lie wholly below ``boundary`` and hold tail rows or
        chunks to merge, oldest first."""
        t = kind.samples.c
        with self.engine.connect() as conn:
            merge = chunk_windows(
                conn, kind, device_id, boundary // self.chunk_ns * self.chunk_ns, self.chunk_ns
            )
        after: int | None = None  # windows before this one were found empty or not yet foldable
        while not self._stop.is_set():
            with self.engine.connect() as conn:
                q = select(func.min(t.ts_ns)).where(t.device_id == device_id)
                if after is not None:
                    q = q.where(t.ts_ns >= after)
                oldest = conn.execute(q).scalar()
            starts = [int(oldest) // self.chunk_ns * self.chunk_ns] if oldest is not None else []
            starts += [w for w in merge if after is None or w >= after][:1]
            if not starts:
                return
            lo = min(starts)
            hi = lo + self.chunk_ns
            if hi > boundary:
                return
            self._fold_window(kind, device_id, lo, hi, now_ns, report)
            after = hi

    def _fold_window(
        self, kind: _Kind, device_id: int, lo: int, hi: int, now_ns: int, report: CompactionReport
    ) -> None:
        """One transaction: take the window's rows out of the tail and its chunks to merge out of
        the chunk table, and put them in chunks (one per GPU, or the host's, of the window)."""
        with self._write_lock, self.engine.begin() as conn:
            taken = take_window(conn, kind, device_id, lo, hi, method=self.fetch)
            merged = take_chunks(conn, kind, device_id, lo, hi, fold=len(taken) > 0)
            if not len(taken) and merged is None:
                return  # nothing deleted, nothing to write: the window is as it should be
            parts = [taken, *(merged.parts if merged is not None else [])]
            chunks = make_chunks(kind, device_id, concat_taken(kind, parts), window_ns=self.chunk_ns)
            if chunks:
                conn.execute(insert(kind.chunks), chunks)
            self.shares.renew_in(conn, device_id, now_ns)
        report.windows += 1
        report.chunks += len(chunks)
        report.rows += len(taken)
        if merged is not None:
            report.merged_chunks += len(merged.parts)
            report.merged_rows += sum(len(p) for p in merged.parts)
        report.chunk_bytes += sum(len(c["data"]) for c in chunks)

    # -- on a thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        # The first pass an interval after start: a starting collector has ingest and the rollup
        # job's catch-up to do first, and nothing becomes foldable in a minute.
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception as exc:  # a failed run (database busy, restarting) is retried next time
                log.warning("compaction run failed: %s", exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleetscope-compaction", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.release()


@dataclass
class Taken:
    """A window's rows taken out of the tail, in columns: ``ts_ns`` and ``gpu_index`` int64 (the
    latter zeros for host rows), ``values`` float64 with NaN for NULL, ``texts`` str or None."""

    ts_ns: Any
    gpu_index: Any
    values: dict[str, Any]
    texts: dict[str, list[str | None]]

    def __len__(self) -> int:
        return len(self.ts_ns)


def take_window(
    conn: Connection, kind: _Kind, device_id: int, lo: int, hi: int, *, method: str = "auto"
) -> Taken:
    """Delete a device's rows in [lo, hi) from ``kind``'s tail table and return them, in the
    connection's transaction: what is returned is exactly what was deleted."""
    if method in ("arrays", "auto") and conn.dialect.name == "postgresql":  # SQLite: always row by row
        return _delete_into_arrays(conn, kind, device_id, lo, hi)
    names = ["ts_ns", *(["gpu_index"] if kind.per_gpu else []), *kind.values, *kind.texts]
    return _columns(kind, names, _delete_returning(conn, kind.samples.name, names, device_id, lo, hi))


def _columns(kind: _Kind, names: Sequence[str], rows: Sequence[Sequence[Any]]) -> Taken:
    import numpy as np

    columns = list(zip(*rows)) if rows else [() for _ in names]
    ts = np.array(columns[0], dtype=np.int64)
    gpu = (
        np.array(columns[names.index("gpu_index")], dtype=np.int64)
        if kind.per_gpu
        else np.zeros(len(ts), np.int64)
    )
    values = {
        n: np.array(columns[i], dtype=np.float64) for i, n in enumerate(names) if n in kind.values
    }  # None: NaN
    texts = {n: list(columns[i]) for i, n in enumerate(names) if n in kind.texts}
    return Taken(ts, gpu, values, texts)


def _delete_into_arrays(conn: Connection, kind: _Kind, device_id: int, lo: int, hi: int) -> Taken:
    """PostgreSQL: ``DELETE ... RETURNING`` in a CTE, aggregated into one row of per-column
    arrays. Numbers travel as ``array_send`` of int8/float8 arrays without NULLs (NULL becomes
    NaN, as the codec stores it), so numpy reads each column straight from the bytes: no Python
    object per value, which was half the cost of a fold."""
    import numpy as np

    numbers = ["ts_ns", *(["gpu_index"] if kind.per_gpu else []), *kind.values]
    aggs = [
        f"array_send(array_agg({n}::int8))"
        if n in ("ts_ns", "gpu_index")
        else f"array_send(array_agg(coalesce({n}::float8, 'NaN'::float8)))"
        for n in numbers
    ] + [f"array_agg({n})" for n in kind.texts]
    sql = (
        f"WITH taken AS (DELETE FROM {kind.samples.name} WHERE device_id = %s AND ts_ns >= %s AND ts_ns < %s "  # noqa: S608 - names are ours
        f"RETURNING {', '.join([*numbers, *kind.texts])}) SELECT count(*), {', '.join(aggs)} FROM taken"
    )
    dbapi: Any = conn.connection.dbapi_connection
    cursor = dbapi.cursor(binary=True)
    try:
        cursor.execute(sql, (device_id, lo, hi))
        row = cursor.fetchone()
    finally:
        cursor.close()
    n = int(row[0])
    if not n:
        return _columns(kind, [*numbers, *kind.texts], [])
    arrays = {}
    for i, name in enumerate(numbers):
        # array_send: ndim, has-null flag, element type, then (length, lower bound) per
        # dimension; then a 4-byte length before each 8-byte big-endian element.
        raw = bytes(row[1 + i])
        header = 12 + 8 * int(np.frombuffer(raw, ">i4", count=1)[0])
        kind_of = ">i8" if name in ("ts_ns", "gpu_index") else ">f8"
        elements = np.frombuffer(raw, dtype=np.dtype([("len", ">i4"), ("v", kind_of)]), offset=header)
        if len(elements) != n:  # pragma: no cover - the server's format, checked rather than trusted
            raise RuntimeError(f"compaction: {len(elements)} values of {name} for {n} rows")
        arrays[name] = elements["v"].astype(np.int64 if kind_of == ">i8" else np.float64)
    texts = {name: list(row[1 + len(numbers) + j]) for j, name in enumerate(kind.texts)}
    gpu = arrays["gpu_index"] if kind.per_gpu else np.zeros(n, np.int64)
    return Taken(arrays["ts_ns"], gpu, {v: arrays[v] for v in kind.values}, texts)


def _delete_returning(
    conn: Connection, table: str, names: Sequence[str], device_id: int, lo: int, hi: int
) -> list[tuple]:
    """Delete a device's rows in [lo, hi) and return them (``names``' columns), through the
    driver's cursor in the connection's transaction: an hour of an 8-GPU server is 30,000 rows,
    and SQLAlchemy's result rows would cost more than the rest of the fold."""
    ph = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    sql = (
        f"DELETE FROM {table} WHERE device_id = {ph} AND ts_ns >= {ph} AND ts_ns < {ph} "  # noqa: S608 - names are ours
        f"RETURNING {', '.join(names)}"
    )
    dbapi: Any = conn.connection.dbapi_connection
    # psycopg's binary results convert float8 in C, about 40 % faster to fetch than text.
    cursor = dbapi.cursor(binary=True) if conn.dialect.name == "postgresql" else dbapi.cursor()
    try:
        cursor.execute(sql, (device_id, lo, hi))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def make_chunks(
    kind: _Kind, device_id: int, taken: Taken, window_ns: int | None = None
) -> list[dict[str, Any]]:
    """The chunk rows (one per GPU for GPU samples, and per aligned window of ``window_ns`` when
    given) holding the ``taken`` rows, each sorted by time."""
    import numpy as np

    if not len(taken):
        return []
    ts, gpu, values, texts = taken.ts_ns, taken.gpu_index, taken.values, taken.texts
    window = ts // window_ns if window_ns else np.zeros(len(ts), np.int64)
    order = np.lexsort((ts, gpu, window))  # by window, GPU, then time; stable for rows of equal time
    w_sorted, g_sorted = window[order], gpu[order]
    cuts = (np.flatnonzero((w_sorted[1:] != w_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])) + 1).tolist()
    out = []
    for start, end in zip([0, *cuts], [*cuts, len(order)]):
        sel = order[start:end]
        gpu_index = int(g_sorted[start])
        picked = sel.tolist()
        chunk_ts = ts[sel]
        chunk = {
            "device_id": device_id,
            "start_ns": int(chunk_ts[0]),
            "end_ns": int(chunk_ts[-1]),
            "rows": len(picked),
            "codec": CODEC_VERSION,
            "data": encode_chunk(
                chunk_ts,
                {n: v[sel] for n, v in values.items()},
                {n: [t[i] for i in picked] for n, t in texts.items()} or None,
            ),
        }
        if kind.per_gpu:
            chunk["gpu_index"] = gpu_index
        out.append(chunk)
    return out


# ------------------------------------------------------------------------------ merging chunks


def chunk_windows(conn: Connection, kind: _Kind, device_id: int, below: int, window_ns: int) -> list[int]:
    """The starts of the device's windows of ``window_ns`` below ``below`` that hold chunks to
    merge: several chunks of one GPU (or of the host), or a chunk of several GPUs. Counted on
    the chunk table's (device, GPU, start) index; no chunk is read."""
    c = kind.chunks.c
    window = bucket_of(c.start_ns, window_ns)
    many = func.count() > 1
    keys = [window, c.gpu_index] if kind.per_gpu else [window]
    q = (
        select(window.label("w"))
        .where(c.device_id == device_id, c.start_ns < below)
        .group_by(*keys)
        .having(or_(many, c.gpu_index == MIXED_GPUS) if kind.per_gpu else many)
    )
    return sorted({int(w) for w in conn.execute(q).scalars()})


@dataclass(frozen=True)
class ChunkMeta:
    """What the chunk table says of a chunk: ``gpu_index`` (None for a host chunk)."""

    gpu_index: int | None
    start_ns: int
    end_ns: int
    rows: int


def chunks_to_merge(
    chunks: Sequence[ChunkMeta], lo: int, hi: int, *, fold: bool
) -> tuple[list[ChunkMeta], bool]:
    """Which of a window's chunks (those with rows in [lo, hi)) to keep as they are, and whether
    the others are to be merged.

    Kept: a GPU's (or the host's) biggest chunk lying within the window, while it holds more rows
    than the GPU's other chunks and all chunks of several GPUs together. The others
    are merged when there is something to gain (or ``fold``: tail rows of the window are folded
    anyway): a chunk of several GPUs, one across the window's edges, or two of one GPU."""
    mixed_rows = sum(m.rows for m in chunks if m.gpu_index == MIXED_GPUS)
    by_gpu: dict[int | None, list[ChunkMeta]] = {}
    for m in chunks:
        if m.gpu_index != MIXED_GPUS:
            by_gpu.setdefault(m.gpu_index, []).append(m)
    keep = []
    for own in by_gpu.values():
        inside = [m for m in own if lo <= m.start_ns and m.end_ns < hi]
        if inside:
            big = max(inside, key=lambda m: m.rows)
            if 2 * big.rows > sum(m.rows for m in own) + mixed_rows:
                keep.append(big)
    rest = list(chunks)
    for m in keep:
        rest.remove(m)
    if fold:
        return keep, bool(rest)
    per_gpu: dict[int | None, int] = {}
    for m in rest:
        per_gpu[m.gpu_index] = per_gpu.get(m.gpu_index, 0) + 1
    worth = any(
        m.gpu_index == MIXED_GPUS or m.start_ns < lo or m.end_ns >= hi or per_gpu[m.gpu_index] > 1
        for m in rest
    )
    return keep, worth


@dataclass
class Merged:
    """The chunks taken out of the chunk table for merging: their rows, one ``Taken`` a chunk."""

    parts: list[Taken]


def take_chunks(
    conn: Connection, kind: _Kind, device_id: int, lo: int, hi: int, *, fold: bool
) -> Merged | None:
    """Delete the device's chunks of window [lo, hi) that are to be merged (``chunks_to_merge``)
    and return their rows, decoded column by column, in the connection's transaction: what is
    returned is exactly what was deleted. None: the window has nothing to merge (nothing
    deleted)."""
    c = kind.chunks.c
    where = [c.device_id == device_id, c.start_ns < hi, c.end_ns >= lo, c.start_ns >= lo - MAX_CHUNK_SPAN_NS]
    gpu_col = [c.gpu_index] if kind.per_gpu else []
    metas = [
        ChunkMeta(int(r[0]) if kind.per_gpu else None, int(r[-3]), int(r[-2]), int(r[-1]))
        for r in conn.execute(select(*gpu_col, c.start_ns, c.end_ns, c.rows).where(*where))
    ]
    keep, worth = chunks_to_merge(metas, lo, hi, fold=fold)
    if not worth:
        return None
    for m in keep:
        same = [c.start_ns == m.start_ns, c.end_ns == m.end_ns, c.rows == m.rows]
        if kind.per_gpu:
            same.append(c.gpu_index == m.gpu_index)
        where.append(not_(and_(*same)))
    taken = conn.execute(delete(kind.chunks).where(*where).returning(*gpu_col, c.data)).all()
    if not taken:
        return None
    return Merged([_decoded(kind, int(r[0]) if kind.per_gpu else None, bytes(r[-1])) for r in taken])


def _decoded(kind: _Kind, gpu_index: int | None, data: bytes) -> Taken:
    """A chunk's rows in columns, as ``take_window`` gives tail rows (a chunk of several GPUs
    gives each row's GPU from its ``gpu_index`` column)."""
    import numpy as np

    ts, values, texts = decode_chunk(data)
    if not kind.per_gpu:
        gpu = np.zeros(len(ts), np.int64)
    elif gpu_index == MIXED_GPUS:
        gpu = values[MIXED_GPU_COLUMN].astype(np.int64)
    else:
        gpu = np.full(len(ts), gpu_index, np.int64)
    if kind.per_gpu:
        values = {n: v for n, v in values.items() if n != MIXED_GPU_COLUMN}
    return Taken(ts, gpu, values, texts)


def concat_taken(kind: _Kind, parts: Sequence[Taken]) -> Taken:
    """Rows of several sources in one ``Taken``, column by column: the kind's columns and any
    other a chunk has, NaN (None for text) where a source lacks a column."""
    import numpy as np

    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0]
    names = list(kind.values)
    texts = list(kind.texts)
    for p in parts:
        names += [n for n in p.values if n not in names]
        texts += [n for n in p.texts if n not in texts]
    if not parts:
        return Taken(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            {n: np.empty(0) for n in names},
            {n: [] for n in texts},
        )
    return Taken(
        np.concatenate([p.ts_ns for p in parts]),
        np.concatenate([p.gpu_index for p in parts]),
        {n: np.concatenate([p.values.get(n, np.full(len(p), np.nan)) for p in parts]) for n in names},
        {n: [s for p in parts for s in p.texts.get(n, [None] * len(p))] for n in texts},
    )
