"""Chunk format 2: a batch's compact-v1 sample section, stored as the agent sent it.

A new agent's batch arrives with its readings already encoded column by column (``proto.compact``:
delta-of-delta times, scaled integer deltas, byte planes). Ingest has to unfold it once to check
it (``ingest.validation``), but it need not encode it again: the section's bytes, as they came,
are the chunk. That is what makes ingest cheap (no row per sample, and no second encoding per
column); the compaction job rewrites these chunks in format 1 (``chunk_codec``) when it merges a
device's hour, so long-lived data is in the denser format.

Layout: format byte (``FORMAT``), compressor byte (as format 1's), then compressed: ``i64``
clock correction (added to every time: the collector's placement of the batch, ``ingest.clocks``),
``u8`` section kind (``compact.SECTION_HOST`` or ``compact.SECTION_GPU``), the section payload.

Reading gives what format 1 gives (``chunk_codec.decode_chunk``): times, the kind's reading
columns (float64, NaN for no reading), for GPU chunks each row's GPU as the column
``gpu_index``, and for host chunks the text columns built exactly as the tail rows had them
(``rows.host_texts``). The payload was checked when it arrived; a chunk that does not read is
``ChunkFormatError``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from fleetscope.proto import compact as C

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from fleetscope.proto.v1 import telemetry_pb2 as pb

FORMAT = 2
_HEAD = struct.Struct("<qB")


def wrap_section(kind: int, payload: bytes, correction_ns: int, level: int) -> bytes:
    """A format-2 chunk of one compact sample section (``kind``: SECTION_HOST or SECTION_GPU)."""
    from fleetscope.collector.storage.chunk_codec import compress

    compressor, packed = compress(_HEAD.pack(correction_ns, kind) + payload, level)
    return bytes((FORMAT, compressor)) + packed


def decode_section_chunk(
    compressor: int, packed: bytes
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, list[str | None]]]:
    import numpy as np

    from fleetscope.collector.storage.chunk_codec import ChunkFormatError, decompress
    from fleetscope.collector.storage.compact_numpy import read_sample_section
    from fleetscope.collector.storage.rows import host_texts
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS

    body = decompress(compressor, packed)
    if len(body) < _HEAD.size:
        raise ChunkFormatError("chunk is truncated")
    correction, kind = _HEAD.unpack_from(body)
    if kind == C.SECTION_GPU:
        names: tuple[str, ...] = GPU_SAMPLE_COLUMNS
    elif kind == C.SECTION_HOST:
        names = HOST_VALUE_COLUMNS
    else:
        raise ChunkFormatError(f"chunk holds section {kind}, not samples")
    try:
        section = read_sample_section(kind, memoryview(body)[_HEAD.size :], C._Budget(C.DEFAULT_MAX_VALUES))
    except C.CompactError as exc:
        raise ChunkFormatError(f"chunk is corrupt: {exc}") from None
    n = len(section.ts_ns)
    _check_shape(section.fields, n, section.gpu_index)
    ts = section.ts_ns + correction
    columns: dict[str, np.ndarray] = {}
    for name in names:
        got = section.columns.get(name)
        if got is None or not len(got[0]):
            continue  # not reported in this batch: absent, as a format-1 chunk has it
        values, nulls = got
        if len(values) != n:
            raise ChunkFormatError(f"chunk column {name} has {len(values)} values for {n} rows")
        if nulls is not None:
            if int(nulls.max()) >= n:
                raise ChunkFormatError(f"chunk column {name} has a null row past its {n} rows")
            values = values.copy()
            values[nulls] = np.nan
        columns[name] = values
    texts: dict[str, list[str | None]] = {}
    if kind == C.SECTION_GPU:
        assert section.gpu_index is not None
        columns["gpu_index"] = section.gpu_index.astype(np.float64)
    else:
        cores, procs = host_texts(section.fields, n)
        texts = {"cpu_cores": cores, "top_processes": procs}
    return ts, columns, texts


def _check_shape(msg: pb.GpuSamples | pb.HostSamples, n: int, gpu_index: np.ndarray | None) -> None:
    """The per-row counts agree with the lists they index: what ingest checked when the section
    arrived (``ingest.validation``), checked again because a damaged chunk (a flipped byte the
    compressor's checksum cannot see) may claim a billion cores or processes for one row."""
    from fleetscope.collector.storage.chunk_codec import ChunkFormatError
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    def agree(counts: Sequence[int], total: int, what: str) -> None:
        if not len(counts):
            return
        if len(counts) != n:
            raise ChunkFormatError(f"chunk has {len(counts)} {what} counts for {n} rows")
        if sum(counts) != total:
            raise ChunkFormatError(f"chunk's {what} counts sum to {sum(counts)}, it holds {total}")

    if isinstance(msg, pb.GpuSamples):
        if gpu_index is None or len(gpu_index) != n:
            raise ChunkFormatError(f"chunk has {0 if gpu_index is None else len(gpu_index)} GPU indexes for {n} rows")
    else:
        cores, freqs = len(msg.cpu_core_percent), len(msg.cpu_core_freq_mhz)
        agree(msg.core_count, cores, "core")
        if freqs and freqs != cores:
            raise ChunkFormatError(f"chunk has {freqs} core frequencies for {cores} core loads")
    procs = msg.processes
    agree(msg.process_count, len(procs.pid), "process")
    if len(procs.name) != len(procs.pid):
        raise ChunkFormatError(f"chunk names {len(procs.name)} processes of {len(procs.pid)}")
