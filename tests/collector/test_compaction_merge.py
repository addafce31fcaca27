"""The compaction job merges the small chunks the collector stores per batch (one GPU chunk of all
GPUs, ``gpu_index`` -1, and one host chunk) into one chunk per GPU (and the host's) and hour,
and every reader gives the same answers before and after. Exactly once: a collector that loses
its share in the middle of a window, or fails there, leaves every chunk as it was; late batches
for a window already merged are merged into a chunk of their own beside it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, insert, select

from fleetscope.collector.jobs import compaction
from fleetscope.collector.jobs.compaction import ChunkMeta, CompactionJob, chunks_to_merge
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.query import device_metrics, session_scope
from fleetscope.collector.storage.chunk_codec import decode_chunk
from fleetscope.collector.storage.chunk_reader import MIXED_GPUS
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    gpu_chunks,
    gpu_samples,
    host_chunks,
    host_samples,
)
from tests.collector.test_compaction import (
    HOUR,
    NOW,
    NS,
    T0,
    answers,
    assert_same_answers,
    chunk_row,
    fill,
    gpu_row,
    host_row,
    store_batches,
    tail_and_chunked,
)

H0 = T0 // HOUR * HOUR  # the hour the data starts in (17 minutes past it)


@pytest.fixture
def batched(db_url: str) -> Any:
    """dev-1: every sample in batch chunks of both GPUs; dev-2: the first 50 minutes in the tail
    (an older collector), the rest in batch chunks (its second hour holds both)."""
    engine = make_engine(db_url)
    ids = fill(engine, layouts=("mixed", "upgrade"))
    RollupJob(engine, owner="roller").run_once(now_ns=NOW)
    yield engine, ids
    engine.dispose()


def chunks(engine: Engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        g, h = gpu_chunks.c, host_chunks.c
        return {
            "gpu": [
                tuple(r)
                for r in conn.execute(
                    select(g.device_id, g.gpu_index, g.start_ns, g.end_ns, g.rows, g.data).order_by(
                        g.device_id, g.gpu_index, g.start_ns, g.end_ns
                    )
                )
            ],
            "host": [
                tuple(r)
                for r in conn.execute(
                    select(h.device_id, h.start_ns, h.end_ns, h.rows, h.data).order_by(
                        h.device_id, h.start_ns, h.end_ns
                    )
                )
            ],
        }


def totals(engine: Engine) -> tuple[int, int]:
    c = tail_and_chunked(engine)
    return c["gpu_tail"] + c["gpu_chunked"], c["host_tail"] + c["host_chunked"]


def assert_merged_below(engine: Engine, until: int) -> None:
    """Windows wholly below ``until``: one chunk per device and GPU (none of several GPUs) and one
    host chunk per device, each within its window and sorted; nothing of them left in the tail."""
    made = chunks(engine)
    seen: dict[tuple, int] = {}
    for device, gpu, start, end, rows, data in made["gpu"]:
        if start < until:
            assert start // HOUR == end // HOUR, "a chunk holds one window"
            assert gpu != MIXED_GPUS
            key = (device, gpu, start // HOUR)
            seen[key] = seen.get(key, 0) + 1
            ts, values, _ = decode_chunk(data)
            assert len(ts) == rows and (ts[1:] >= ts[:-1]).all() and "gpu_index" not in values
    assert seen and set(seen.values()) == {1}, seen
    assert {(d, w) for d, _g, w in seen} == {(d, w) for d in (1, 2) for w in range(H0 // HOUR, until // HOUR)}
    hosts: dict[tuple, int] = {}
    for device, start, end, _rows, data in made["host"]:
        if start < until:
            assert start // HOUR == end // HOUR
            hosts[(device, start // HOUR)] = hosts.get((device, start // HOUR), 0) + 1
            assert set(decode_chunk(data)[2]) == {"cpu_cores", "top_processes"}
    assert set(hosts.values()) == {1} and set(hosts) == {(d, w) for d, _g, w in seen}
    with engine.connect() as conn:
        for t in (gpu_samples, host_samples):
            assert conn.execute(select(func.count()).where(t.c.ts_ns < until)).scalar_one() == 0


def test_batch_chunks_are_merged_into_one_chunk_per_gpu_and_hour_and_every_reader_answers_the_same(
    batched: Any,
) -> None:
    engine, ids = batched
    before = answers(engine, ids["incident"])
    counts = totals(engine)
    small = tail_and_chunked(engine)["gpu_chunks"]
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.ran and report.rows > 0 and report.merged_chunks > 0
    # The boundary (now - 1 h) leaves two windows below it: the first partial hour and the next.
    assert_merged_below(engine, H0 + 2 * HOUR)
    assert totals(engine) == counts
    after_chunks = tail_and_chunked(engine)["gpu_chunks"]
    assert after_chunks < small - 100
    after = answers(engine, ids["incident"])
    assert_same_answers(before, after)
    for key in before:  # raw rows come back exactly
        if key.startswith(("metrics", "limited", "last", "count")):
            assert before[key] == after[key], key
    # Nothing more to do: a second pass rewrites nothing.
    made = chunks(engine)
    again = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert again.windows == again.merged_chunks == again.rows == 0
    assert chunks(engine) == made
    # An hour later the next window is merged too, its leftover from the batch across the hour included.
    later = CompactionJob(engine, owner="c1").run_once(now_ns=NOW + HOUR)
    assert later.merged_chunks > 0
    assert_merged_below(engine, H0 + 3 * HOUR)
    assert totals(engine) == counts
    assert_same_answers(before, answers(engine, ids["incident"]))


def late_batches(engine: Engine, offset_ns: int, count: int = 3) -> None:
    """``count`` late batches of 7 samples for the second hour (already merged), between its rows."""
    g_rows, h_rows = [], []
    for i in range(7 * count):
        ts = H0 + HOUR + 5 * 60 * NS + i * 10 * NS + offset_ns
        g_rows += [gpu_row(1, g, ts, 5000 + i) for g in (0, 1)]
        h_rows.append(host_row(1, ts, 5000 + i))
    with engine.begin() as conn:
        store_batches(conn, 1, g_rows, h_rows)


def remove_late(engine: Engine, offset_ns: int) -> None:
    with engine.begin() as conn:
        for t in (gpu_chunks, host_chunks):
            conn.execute(
                delete(t).where(t.c.device_id == 1, t.c.start_ns % (10 * NS) == offset_ns % (10 * NS))
            )


def test_late_batches_for_a_merged_hour_are_merged_beside_it(batched: Any) -> None:
    engine, ids = batched
    late_batches(engine, 1234)
    late_batches(engine, 5678)
    expected = answers(engine, ids["incident"])  # every sample there, in batch chunks
    remove_late(engine, 1234)
    remove_late(engine, 5678)
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    merged = chunks(engine)
    hour = [r for r in merged["gpu"] if r[0] == 1 and r[2] // HOUR == H0 // HOUR + 1]
    assert [r[1] for r in hour] == [0, 1]
    late_batches(engine, 1234)  # arrive after their hour was merged
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.merged_chunks == 2 * 3 and report.rows == 0 and report.chunks == 2 + 1
    now = chunks(engine)
    mine = [r for r in now["gpu"] if r[0] == 1 and r[2] // HOUR == H0 // HOUR + 1]
    assert len(mine) == 4 and set(hour) <= set(mine), "the hour's chunks kept, one chunk per GPU beside them"
    assert sorted(r[4] for r in mine if r not in hour) == [21, 21]
    # More late batches: merged with the late chunk of before, the hour's big chunk is left alone.
    late_batches(engine, 5678)
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.merged_chunks == 2 * 3 + 2 + 1 and report.chunks == 2 + 1
    mine = [r for r in chunks(engine)["gpu"] if r[0] == 1 and r[2] // HOUR == H0 // HOUR + 1]
    assert len(mine) == 4 and set(hour) <= set(mine)
    assert sorted(r[4] for r in mine if r not in hour) == [42, 42]
    assert_same_answers(expected, answers(engine, ids["incident"]))
    with session_scope(engine) as s:
        lo = H0 + HOUR + 5 * 60 * NS
        rows = device_metrics(session=s, device="dev-1", since_ns=lo, until_ns=lo + 60 * NS).gpu
        times = [(p.ts_ns, p.gpu_index) for p in rows]
        assert times == sorted(times) and len(times) == len(set(times)) and (lo + 1234, 1) in times


def test_a_collector_that_loses_its_share_mid_window_leaves_every_chunk_as_it_was(
    batched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, ids = batched
    before = answers(engine, ids["incident"])
    counts = totals(engine)
    later = max(NOW, time.time_ns()) + 10 * 60 * NS  # the victim's lease has expired by then
    thief = CompactionJob(engine, owner="thief")
    stolen: list[frozenset[int]] = []

    def steal() -> None:
        stolen.append(thief.shares.acquire(later))

    if engine.dialect.name == "postgresql":
        # In the middle of the first window, its chunks deleted and not committed, another
        # collector takes the shares over (the victim stalled past its lease).
        real = compaction.take_chunks

        def take_then_lose(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            if out is not None and not stolen:
                thief_thread = threading.Thread(target=steal)
                thief_thread.start()
                thief_thread.join(30)
            return out

        monkeypatch.setattr(compaction, "take_chunks", take_then_lose)
    else:
        # SQLite has one writer at a time: the shares are taken over between the victim's
        # reads and its first window (whose transaction then deletes the chunks and fails).
        real_windows = compaction.chunk_windows

        def windows_then_lose(*args: Any, **kwargs: Any) -> Any:
            if not stolen:
                steal()
            return real_windows(*args, **kwargs)

        monkeypatch.setattr(compaction, "chunk_windows", windows_then_lose)
    victim = CompactionJob(engine, owner="victim")
    report = victim.run_once(now_ns=NOW)
    assert stolen and len(stolen[0]) == 16
    assert report.ran and report.devices == report.windows == report.merged_chunks == 0
    monkeypatch.undo()
    assert totals(engine) == counts
    assert_same_answers(before, answers(engine, ids["incident"]))
    # The thief merges what is left (the victim's committed windows stay merged, nothing twice).
    assert thief.run_once(now_ns=later).merged_chunks > 0
    assert totals(engine) == counts
    assert_merged_below(engine, H0 + 3 * HOUR)
    assert_same_answers(before, answers(engine, ids["incident"]))


def test_a_window_that_fails_after_taking_its_chunks_rolls_back(
    batched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _ = batched
    made = chunks(engine)
    tail = tail_and_chunked(engine)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk full")

    monkeypatch.setattr(compaction, "make_chunks", broken)
    with pytest.raises(RuntimeError):
        CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert chunks(engine) == made and tail_and_chunked(engine) == tail


def test_late_rows_in_the_tail_for_a_merged_window_join_its_late_chunks(batched: Any) -> None:
    engine, ids = batched
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    late_batches(engine, 1234)
    ts = H0 + HOUR + 9 * 60 * NS + 4321
    row = gpu_row(1, 0, ts, 77)
    # The answers with the row in a chunk (a bucket split between the tail and chunks adds the
    # two parts' spans and deltas, as the readers do, so the answers are compared from chunks).
    with engine.begin() as conn:
        conn.execute(insert(gpu_chunks).values(chunk_row(1, 0, [row], GPU_SAMPLE_COLUMNS)))
    expected = answers(engine, ids["incident"])
    with engine.begin() as conn:  # it is a row an older collector wrote to the tail
        conn.execute(delete(gpu_chunks).where(gpu_chunks.c.start_ns == ts))
        conn.execute(insert(gpu_samples).values(row))
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.rows == 1 and report.merged_chunks == 2 * 3
    mine = [r for r in chunks(engine)["gpu"] if r[0] == 1 and r[2] // HOUR == H0 // HOUR + 1]
    assert sorted(r[4] for r in mine)[:2] == [21, 22], (
        "the tail row and the late batches in one chunk per GPU"
    )
    assert_same_answers(expected, answers(engine, ids["incident"]))


M = ChunkMeta


@pytest.mark.parametrize(
    ("chunks_in", "fold", "kept", "worth"),
    [
        # One per-GPU chunk within the window: nothing to gain.
        ([M(0, 10, 20, 5)], False, [M(0, 10, 20, 5)], False),
        # Batches of several GPUs: merged.
        ([M(MIXED_GPUS, 10, 20, 6), M(MIXED_GPUS, 21, 30, 6)], False, [], True),
        # A single batch of several GPUs too: split by GPU.
        ([M(MIXED_GPUS, 10, 20, 6)], False, [], True),
        # A single-GPU device's batches: the biggest is no bigger than the rest, all merged.
        ([M(0, 10, 20, 5), M(0, 21, 30, 5), M(0, 31, 40, 5)], False, [], True),
        # A merged hour and a few late batches: the hour stays, the late ones are merged.
        (
            [M(0, 0, 99, 100), M(1, 0, 99, 100), M(MIXED_GPUS, 50, 52, 6), M(MIXED_GPUS, 60, 62, 6)],
            False,
            [M(0, 0, 99, 100), M(1, 0, 99, 100)],
            True,
        ),
        # The hour and its one late chunk per GPU: settled.
        ([M(0, 0, 99, 100), M(0, 50, 60, 12)], False, [M(0, 0, 99, 100)], False),
        # ... unless tail rows are folded anyway: then the late chunk joins them.
        ([M(0, 0, 99, 100), M(0, 50, 60, 12)], True, [M(0, 0, 99, 100)], True),
        # Late rows outweigh the hour: everything merged again.
        ([M(0, 0, 99, 100), M(MIXED_GPUS, 50, 52, 120)], False, [], True),
        # A chunk across the window's edge is never kept, and is split.
        ([M(0, 90, 120, 100)], False, [], True),
        # Host chunks (no GPU).
        ([M(None, 10, 20, 5), M(None, 21, 30, 5)], False, [], True),
        ([M(None, 0, 99, 100)], False, [M(None, 0, 99, 100)], False),
    ],
)
def test_which_chunks_of_a_window_are_merged(chunks_in: list, fold: bool, kept: list, worth: bool) -> None:
    assert chunks_to_merge(chunks_in, 0, 100, fold=fold) == (kept, worth)
