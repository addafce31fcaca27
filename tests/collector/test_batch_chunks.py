"""A batch's samples are stored as it came: one host chunk and one GPU chunk in the batch's
transaction, no row per sample, every value back bit for bit, and the newest reading per device
and GPU kept for "now" readers, never replaced by an older one (SQLite and PostgreSQL)."""

from __future__ import annotations

import math
import time

import pytest
from sqlalchemy import text

from fleetscope.agent.daemon.batcher import Pending, build_batches
from fleetscope.agent.records import GpuSample, HostSample
from fleetscope.collector.ingest.validation import Limits, expand_compact, validate_batch
from fleetscope.collector.storage import compact_chunk
from fleetscope.collector.storage.chunk_codec import CODEC_VERSION
from fleetscope.collector.storage.chunk_reader import MIXED_GPUS, read_samples
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.writer import BatchWriter, WriteItem
from fleetscope.proto.compact import compact
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.collector.test_storage import _register

S = 10**9


@pytest.fixture
def store(db_url: str):  # type: ignore[no-untyped-def]
    engine = make_engine(db_url)
    writer = BatchWriter(engine)
    writer.start()
    yield engine, writer
    writer.stop()
    engine.dispose()


def _gpu_value(gpu: int, i: int) -> dict:
    # Readings of every kind the codec has a path for: integers, decimals, -0.0, a value that is
    # no decimal (0.1 + 0.2), a reading that is missing in some rows.
    return {
        "util_gpu_percent": float((i * 7 + gpu) % 101),
        "temp_c": 60.0 + gpu + i * 0.5,
        "power_w": 0.1 + 0.2 if i % 3 == 0 else -0.0,
        "memory_used_bytes": float((gpu + 1) << 30) + i,
        "energy_j": float(1_000 * gpu + i),
        **({"sm_clock_mhz": 1410.0 - i} if i % 4 else {}),
    }


def _item(device_id: int, seq: int, t0: int, *, gpus: int, rows: int, correction_ns: int = 0, form: str = "compact") -> WriteItem:
    pending = Pending(
        host=[HostSample(ts_ns=t0 + i * S, cpu_percent=10.0 + i, mem_used_bytes=float(8 << 30), cpu_core_percent=(5.0, 7.5))
              for i in range(rows)],
        gpu=[GpuSample(ts_ns=t0 + i * S, gpu_index=g, **_gpu_value(g, i)) for i in range(rows) for g in range(gpus)],
    )
    batch = pb.Batch(agent_id="id-gpu-node-1", boot_id="boot", seq=seq, created_ns=t0 + rows * S, sent_ns=t0 + rows * S)
    for bb in build_batches(pending, now_ns=t0 + rows * S):
        batch.MergeFrom(bb.batch)
    batch.seq = seq
    unfolded = None
    if form == "compact":  # as a new agent sends it: ingest unfolds it to check it, and keeps its sections
        batch = compact(batch)
        unfolded = expand_compact(batch, Limits())
    decoded = validate_batch(batch, Limits(), unfolded=unfolded)
    return WriteItem(batch=batch, device_id=device_id, agent_id="id-gpu-node-1", boot_id="boot", seq=seq,
                     received_ns=time.time_ns(), correction_ns=correction_ns, clock_skew_ns=0, decoded=decoded,
                     compact_sections=unfolded.sections if unfolded is not None else None)


def _count(engine, sql: str, **params) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar() or 0)


def _same(a: float, b: float | None) -> bool:
    if b is None:
        return a != a  # NULL reads back as NaN
    return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b


@pytest.mark.parametrize("form", ["compact", "plain"])
def test_a_batch_is_one_host_and_one_gpu_chunk_with_every_value_back(store, form: str) -> None:  # type: ignore[no-untyped-def]
    """A compact batch's sections are stored as they came (chunk format 2), a plain batch's
    columns encoded (format 1): either reads back the same."""
    engine, writer = store
    device_id = _register(engine)
    t0 = (time.time_ns() // S - 600) * S
    outcome = writer.submit(_item(device_id, 1, t0, gpus=3, rows=40, form=form)).result(30)
    assert (outcome.duplicate, outcome.rows) == (False, 40 + 120)
    assert _count(engine, "SELECT count(*) FROM gpu_samples") == 0, "no row per sample"
    assert _count(engine, "SELECT count(*) FROM host_samples") == 0
    assert _count(engine, "SELECT count(*) FROM host_chunks WHERE device_id = :d AND rows = 40", d=device_id) == 1
    assert _count(engine, "SELECT count(*) FROM gpu_chunks WHERE device_id = :d AND rows = 120 AND gpu_index = :m",
                  d=device_id, m=MIXED_GPUS) == 1
    codec = compact_chunk.FORMAT if form == "compact" else CODEC_VERSION
    assert _count(engine, "SELECT count(*) FROM gpu_chunks WHERE codec = :c", c=codec) == 1
    assert _count(engine, "SELECT count(*) FROM host_chunks WHERE codec = :c", c=codec) == 1
    with engine.connect() as conn:
        gpu = read_samples(conn, "gpu", [device_id], t0, t0 + 3600 * S)
        one = read_samples(conn, "gpu", [device_id], t0, t0 + 3600 * S, gpu_index=2)
        host = read_samples(conn, "host", [device_id], t0, t0 + 3600 * S, texts=("cpu_cores",))
    assert len(gpu) == 120 and len(one) == 40 and len(host) == 40
    for k in range(len(gpu)):
        i, g = int((gpu.ts_ns[k] - t0) // S), int(gpu.gpu_index[k])
        want = _gpu_value(g, i)
        for name in ("util_gpu_percent", "temp_c", "power_w", "memory_used_bytes", "energy_j", "sm_clock_mhz"):
            assert _same(float(gpu.values[name][k]), want.get(name)), (name, i, g, gpu.values[name][k], want.get(name))
    assert sorted(one.values["energy_j"].tolist()) == [2_000.0 + i for i in range(40)]
    assert host.values["cpu_percent"].tolist() == [10.0 + i for i in range(40)]
    assert host.texts["cpu_cores"][0] == "[[5.0,null],[7.5,null]]"


@pytest.mark.parametrize("form", ["compact", "plain"])
def test_one_gpu_batch_is_that_gpus_chunk_and_a_clock_correction_moves_it(store, form: str) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    t0 = (time.time_ns() // S - 600) * S
    writer.submit(_item(device_id, 1, t0, gpus=1, rows=10, correction_ns=5 * S, form=form)).result(30)
    with engine.connect() as conn:
        chunk = conn.execute(text("SELECT gpu_index, start_ns, end_ns FROM gpu_chunks WHERE device_id = :d"),
                             {"d": device_id}).one()
        assert tuple(chunk) == (0, t0 + 5 * S, t0 + 14 * S)
        assert read_samples(conn, "gpu", [device_id], t0, t0 + 5 * S, columns=()).ts_ns.size == 0
        moved = read_samples(conn, "gpu", [device_id], t0, t0 + 3600 * S, columns=("energy_j",))
    assert moved.ts_ns.tolist() == [t0 + (5 + i) * S for i in range(10)]
    assert moved.values["energy_j"].tolist() == [float(i) for i in range(10)]


def test_a_replayed_batch_stores_nothing_twice(store) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    t0 = (time.time_ns() // S - 600) * S
    first = writer.submit(_item(device_id, 1, t0, gpus=2, rows=20)).result(30)
    again = writer.submit(_item(device_id, 1, t0, gpus=2, rows=20)).result(30)
    assert (first.duplicate, again.duplicate, again.rows) == (False, True, 0)
    assert _count(engine, "SELECT sum(rows) FROM gpu_chunks") == 40
    assert _count(engine, "SELECT count(*) FROM host_chunks") == 1


def test_the_newest_reading_is_kept_and_an_older_batch_never_replaces_it(store) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    t0 = (time.time_ns() // S - 3600) * S
    # The newest batch first, then a backlog from before it (a drone's spool draining behind
    # fresh data), then two batches of one group: the latest rows are the newest readings.
    writer.submit(_item(device_id, 10, t0 + 1000 * S, gpus=2, rows=5)).result(30)
    writer.submit(_item(device_id, 3, t0, gpus=2, rows=5)).result(30)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT gpu_index, ts_ns, energy_j FROM gpu_latest WHERE device_id = :d ORDER BY gpu_index"),
                            {"d": device_id}).all()
        host = conn.execute(text("SELECT ts_ns, cpu_percent, cpu_cores FROM host_latest WHERE device_id = :d"),
                            {"d": device_id}).one()
    assert [tuple(r) for r in rows] == [(0, t0 + 1004 * S, 4.0), (1, t0 + 1004 * S, 1_004.0)]
    assert tuple(host) == (t0 + 1004 * S, 14.0, "[[5.0,null],[7.5,null]]")
    futures = [writer.submit(_item(device_id, seq, t0 + off * S, gpus=1, rows=3)) for seq, off in ((11, 2000), (12, 1500))]
    for f in futures:
        f.result(30)
    with engine.connect() as conn:
        newest = conn.execute(text("SELECT gpu_index, ts_ns FROM gpu_latest WHERE device_id = :d ORDER BY gpu_index"),
                              {"d": device_id}).all()
    assert [tuple(r) for r in newest] == [(0, t0 + 2002 * S), (1, t0 + 1004 * S)], "GPU 1 sent nothing newer"


def test_a_damaged_format_2_chunk_is_one_clear_error_and_never_another_exception() -> None:
    """A compact section stored as it came (format 2) that the disk or a bad copy damaged: the
    reader says "chunk is ..." in one line, whatever the damage, and a sound chunk still reads."""
    import random

    import zstandard

    from fleetscope.collector.storage.chunk_codec import ChunkFormatError, decode_chunk

    t0 = (time.time_ns() // S - 600) * S
    item = _item(1, 1, t0, gpus=2, rows=30)
    assert item.compact_sections is not None
    for kind, payload in item.compact_sections.items():
        blob = compact_chunk.wrap_section(kind, payload, 0, 3)
        ts, _cols, _texts = decode_chunk(blob)
        assert len(ts) in (30, 60)
        body = zstandard.ZstdDecompressor().decompress(blob[2:])

        def wrapped(damaged_body: bytes, blob: bytes = blob) -> bytes:
            return blob[:2] + zstandard.ZstdCompressor().compress(damaged_body)

        damaged = [blob[:1], blob[:2], blob[:-4], blob[:2] + b"\x00" * 40, bytes([compact_chunk.FORMAT, 9]) + blob[2:],
                   wrapped(body[:5]), wrapped(body[:-7]), wrapped(body + b"\x01"), wrapped(body[:8] + bytes([7]) + body[9:])]
        rng = random.Random(kind)
        for _ in range(300):  # bytes flipped anywhere in the body, then compressed again (what zstd's check cannot see)
            b = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            damaged.append(wrapped(bytes(b)))
        refused = 0
        for bad in damaged:
            try:
                decode_chunk(bad)
            except ChunkFormatError as exc:
                refused += 1
                assert str(exc).startswith("chunk") and "\n" not in str(exc), str(exc)
        assert refused >= 9, "every cut, foreign compressor and foreign section kind is refused"
