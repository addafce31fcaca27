"""A validated batch's samples as the collector stores them: one chunk per kind, as they came.

A batch carries its readings column by column (compact-v1 on the wire); the writer keeps them
that way. The host readings become one ``host_chunks`` row and the GPU readings one
``gpu_chunks`` row, written in the batch's transaction beside its claim: no row per sample is
built or stored. A compact batch's sections are stored as they came (chunk format 2,
``storage.compact_chunk``: no second encoding); a plain batch of an older agent is encoded
column by column (format 1, ``chunk_codec``). A batch of several GPUs is one chunk whose
``gpu_index`` is ``MIXED_GPUS`` and whose rows carry their GPU in a value column; the compaction
job later merges a device's small chunks into one per GPU and hour, in format 1.

Ingest compresses at a fast level (``INGEST_LEVEL``): compaction rewrites the chunk at the
codec's best level when it merges it, so the time goes where nobody waits for it.

Beside the chunks, each batch gives its newest reading per device (``host_latest``) and per GPU
(``gpu_latest``): what "now" readers (the Fleet page, ``/metrics/fleet``, alert rules) read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetscope.collector.storage import compact_chunk
from fleetscope.collector.storage.chunk_codec import CODEC_VERSION, encode_chunk
from fleetscope.collector.storage.chunk_reader import HOST_TEXT_COLUMNS, MIXED_GPU_COLUMN, MIXED_GPUS
from fleetscope.collector.storage.decoded import Decoded
from fleetscope.collector.storage.rows import host_texts, host_texts_of_row
from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS
from fleetscope.proto.compact import SECTION_GPU, SECTION_HOST
from fleetscope.proto.v1 import telemetry_pb2 as pb

INGEST_LEVEL = 3  # zstd level at ingest (compaction re-encodes at chunk_codec.ZSTD_LEVEL)

# Column order of the rows below, as statements.TABLE_COLUMNS names them.
CHUNK_COLUMNS = ("device_id", "gpu_index", "start_ns", "end_ns", "rows", "codec", "data")
HOST_CHUNK_COLUMNS = ("device_id", "start_ns", "end_ns", "rows", "codec", "data")
GPU_LATEST_COLUMNS = ("device_id", "gpu_index", "ts_ns", *GPU_SAMPLE_COLUMNS)
HOST_LATEST_COLUMNS = ("device_id", "ts_ns", *HOST_VALUE_COLUMNS, *HOST_TEXT_COLUMNS)


@dataclass(frozen=True)
class SectionToWrap:
    """A chunk's data still to be made: a compact section to wrap (``compact_chunk.wrap_section``)."""

    kind: int
    payload: bytes
    correction_ns: int
    level: int


@dataclass
class SampleChunks:
    """What a batch's samples store: chunk rows and latest-reading rows, in table column order.
    A chunk row's data may be a ``SectionToWrap`` until ``wrap_sections`` is called."""

    host_chunks: list[tuple] = field(default_factory=list)
    gpu_chunks: list[tuple] = field(default_factory=list)
    host_latest: list[tuple] = field(default_factory=list)
    gpu_latest: list[tuple] = field(default_factory=list)
    sample_rows: int = 0

    def wrap_sections(self) -> None:
        """Compress the chunks still to be wrapped. The writer does it in its own thread: zstd
        releases the GIL, so it runs beside the ingest thread's checks instead of in their way."""
        for rows in (self.host_chunks, self.gpu_chunks):
            for i, row in enumerate(rows):
                data = row[-1]
                if isinstance(data, SectionToWrap):
                    rows[i] = (*row[:-1], compact_chunk.wrap_section(data.kind, data.payload, data.correction_ns, data.level))


def sample_chunks(
    batch: pb.Batch,
    decoded: Decoded,
    *,
    device_id: int,
    correction_ns: int,
    level: int = INGEST_LEVEL,
    sections: dict[int, bytes] | None = None,
) -> SampleChunks:
    """The batch's host and GPU samples as one chunk each (times shifted by ``correction_ns``),
    and the newest reading of the device and of each GPU. ``sections``: the compact-v1 sample
    sections the batch came in (``ingest.validation.expand_compact``), stored as they are
    (chunk format 2, ``storage.compact_chunk``), compressed when ``SampleChunks.wrap_sections``
    is called; a plain batch's columns are encoded (format 1)."""
    import numpy as np

    sections = sections or {}
    out = SampleChunks()
    host_ts, host = decoded.host_ts, decoded.host_fields
    n = len(host_ts)
    if n:
        ts = host_ts + correction_ns
        i = int(np.lexsort((np.arange(n), ts))[-1])  # the newest row (the last of the largest time)
        if SECTION_HOST in sections:
            codec = compact_chunk.FORMAT
            data: bytes | SectionToWrap = SectionToWrap(SECTION_HOST, sections[SECTION_HOST], correction_ns, level)
            newest_texts = host_texts_of_row(host, n, i)
        else:
            cores, procs = host_texts(host, n)
            cols = {name: np.array(decoded.host[name], dtype=np.float64) for name in HOST_VALUE_COLUMNS}
            texts = {
                name: values
                for name, values in zip(HOST_TEXT_COLUMNS, (cores, procs))
                if any(v is not None for v in values)
            }
            codec, data = CODEC_VERSION, encode_chunk(ts, cols, texts, level=level)
            newest_texts = (cores[i], procs[i])
        out.host_chunks.append((device_id, int(ts.min()), int(ts.max()), n, codec, data))
        out.host_latest.append(
            (device_id, int(ts[i]), *(decoded.host[name][i] for name in HOST_VALUE_COLUMNS), *newest_texts)
        )
        out.sample_rows += n
    gpu_ts = decoded.gpu_ts
    n = len(gpu_ts)
    if n:
        ts = gpu_ts + correction_ns
        index = decoded.gpu_index
        first = int(index[0])
        chunk_gpu = first if (index == first).all() else MIXED_GPUS
        if SECTION_GPU in sections:  # its rows carry their GPU whether one or several
            codec = compact_chunk.FORMAT
            data = SectionToWrap(SECTION_GPU, sections[SECTION_GPU], correction_ns, level)
        else:
            cols = {name: np.array(decoded.gpu[name], dtype=np.float64) for name in GPU_SAMPLE_COLUMNS}
            if chunk_gpu == MIXED_GPUS:
                cols[MIXED_GPU_COLUMN] = index.astype(np.float64)
            codec, data = CODEC_VERSION, encode_chunk(ts, cols, None, level=level)
        out.gpu_chunks.append((device_id, chunk_gpu, int(ts.min()), int(ts.max()), n, codec, data))
        # Each GPU's newest row: sorted by (GPU, time, position), the last of each GPU.
        order = np.lexsort((np.arange(n), ts, index))
        last = order[np.append(index[order][1:] != index[order][:-1], True)]
        for i in last.tolist():
            out.gpu_latest.append(
                (device_id, int(index[i]), int(ts[i]), *(decoded.gpu[name][i] for name in GPU_SAMPLE_COLUMNS))
            )
        out.sample_rows += n
    return out

