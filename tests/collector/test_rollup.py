"""The rollup job reads raw samples wherever they sit: rows of the tail tables (older collectors)
and chunks (each batch as it arrived, one GPU chunk of all GPUs or one per GPU; what compaction
merged). A device's rollups and progress are the same whichever way its samples are stored, and
a bucket split between the tail and chunks is combined the way the readers combine it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select, update

from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.query import device_series, session_scope
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import gpu_rollups, host_rollups, rollup_progress
from fleetscope.collector.storage.rollups import GPU_AGGS, HOST_AGGS
from fleetscope.collector.storage.schema import Device
from tests.collector.test_compaction import END, HOUR, NOW, NS, STEP, T0, gpu_row, host_row, store

DAY = 86400 * NS
# Device id -> how its samples are stored; every device holds the very same readings.
LAYOUTS = {1: "tail", 2: "mixed", 3: "per_gpu", 4: "upgrade", 5: "alternate"}


def fill(engine: Engine) -> None:
    with engine.begin() as conn:
        for d, layout in LAYOUTS.items():
            conn.execute(
                insert(Device.__table__).values(
                    id=d,
                    agent_id=f"agent-{d}",
                    name=f"dev-{d}",
                    kind="server",
                    first_seen_ns=T0,
                    last_seen_ns=END,
                )
            )
            g_rows, h_rows = [], []
            for i, ts in enumerate(range(T0, END, STEP)):
                jitter = (i * 7919) % 1000 * 1000
                g_rows += [gpu_row(d, g, ts + jitter, i) for g in range(2)]
                h_rows.append(host_row(d, ts + jitter, i))
            if layout == "alternate":  # every other 4 sample times in the tail: every minute in both
                in_tail = {r["ts_ns"] for i, r in enumerate(h_rows) if (i // 4) % 2 == 0}
                store(
                    conn,
                    d,
                    [r for r in g_rows if r["ts_ns"] in in_tail],
                    [r for r in h_rows if r["ts_ns"] in in_tail],
                    "tail",
                )
                store(
                    conn,
                    d,
                    [r for r in g_rows if r["ts_ns"] not in in_tail],
                    [r for r in h_rows if r["ts_ns"] not in in_tail],
                    "mixed",
                )
            else:
                store(conn, d, g_rows, h_rows, layout)


def rollups(engine: Engine, device_id: int) -> dict[str, Any]:
    """The device's rollup rows, keyed by (step, bucket, GPU), and its progress marks."""
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        for name, table in (("gpu", gpu_rollups), ("host", host_rollups)):
            c = table.c
            for row in conn.execute(select(table).where(c.device_id == device_id)):
                m = dict(row._mapping)
                key = (name, m.pop("step_s"), m.pop("bucket_ns"), m.pop("gpu_index", None))
                m.pop("device_id")
                out[str(key)] = m
        p = rollup_progress.c
        for step, until in conn.execute(select(p.step_s, p.rolled_until_ns).where(p.device_id == device_id)):
            out[f"progress {step}"] = until
    return out


def assert_close(a: dict[str, Any], b: dict[str, Any], *, exact: bool = False, split: bool = False) -> None:
    """Equal rollups: aggregates of floats to their last bits' rounding (SQL and numpy sum in
    different orders), bit for bit with ``exact``. ``split``: a bucket's tail part and chunk part
    each give their own delta and span, and these add up (what the readers do too), so a split
    bucket's deltas and spans are at most the whole's."""
    assert set(a) == set(b), set(a) ^ set(b)
    deltas = {g.name for g in (*GPU_AGGS, *HOST_AGGS) if g.how == "delta"} | {"span_ns"}
    for key in a:
        if key.startswith("progress"):
            assert a[key] == b[key], key
            continue
        for col, x in a[key].items():
            y = b[key][col]
            if split and col in deltas:
                assert (x is None) == (y is None) and (x is None or y <= x), (key, col, x, y)
            elif exact or x is None or isinstance(x, int):
                assert x == y, (key, col, x, y)
            else:
                assert y == pytest.approx(x, rel=1e-12, abs=1e-9), (key, col, x, y)


@pytest.fixture
def engine(db_url: str) -> Any:
    e = make_engine(db_url)
    fill(e)
    yield e
    e.dispose()


def test_rollups_are_the_same_from_tail_rows_and_from_batch_chunks(engine: Engine) -> None:
    with session_scope(engine) as s:  # the minute series before rolling up: raw samples only
        raw = {
            d: device_series(
                session=s,
                device=f"dev-{d}",
                since_ns=T0 - HOUR,
                until_ns=END + HOUR,
                step_s=60,
                latency=False,
            )
            for d in LAYOUTS
        }
    assert all(r.sources == ("raw",) for r in raw.values())
    report = RollupJob(engine, owner="roller").run_once(now_ns=NOW)
    assert report.ran and report.devices == len(LAYOUTS) and report.rows[60] == len(LAYOUTS) * (2 + 1) * 179
    made = {d: rollups(engine, d) for d in LAYOUTS}
    tail = made[1]
    # Minutes up to the newest sample less the settle time, hours up to the last whole hour.
    last = (END - T0) // STEP - 1
    newest = T0 + last * STEP + (last * 7919) % 1000 * 1000
    assert tail["progress 60"] == (newest - 10 * NS) // (60 * NS) * 60 * NS
    assert tail["progress 3600"] == tail["progress 60"] // HOUR * HOUR
    assert sum(1 for k in tail if k.startswith("('gpu', 60,")) == 2 * (
        (tail["progress 60"] - T0) // (60 * NS)
    )
    assert sum(1 for k in tail if k.startswith("('gpu', 3600,")) == 2 * 3
    for d in (2, 3, 4):
        assert_close(tail, made[d])
    assert_close(made[2], made[3], exact=True)  # a batch of all GPUs or one chunk per GPU: bit for bit
    assert_close(tail, made[5], split=True)
    # Each device's chart reads the same before and after its samples were rolled up.
    with session_scope(engine) as s:
        for d in LAYOUTS:
            after = device_series(
                session=s,
                device=f"dev-{d}",
                since_ns=T0 - HOUR,
                until_ns=END + HOUR,
                step_s=60,
                latency=False,
            )
            assert after.sources == ("minute", "raw"), d
            for name in ("gpu", "host"):
                got, want = getattr(after, name).columns, getattr(raw[d], name).columns
                assert set(got) == set(want)
                for col in want:
                    for x, y in zip(want[col], got[col], strict=True):
                        assert (x is None and y is None) or y == pytest.approx(x, rel=1e-12, abs=1e-9), (
                            d,
                            name,
                            col,
                        )


def test_a_device_whose_chunks_all_end_before_its_mark_still_rolls_its_coarser_steps(engine: Engine) -> None:
    """The newest sample is looked for only among chunks that may end past the minute mark; a
    device whose samples all end before it (expired, say) still rolls hours up to the mark."""
    assert RollupJob(engine, owner="roller").run_once(now_ns=NOW).ran
    made = rollups(engine, 2)
    with engine.begin() as conn:
        conn.execute(delete(gpu_rollups).where(gpu_rollups.c.device_id == 2, gpu_rollups.c.step_s == 3600))
        conn.execute(delete(host_rollups).where(host_rollups.c.device_id == 2, host_rollups.c.step_s == 3600))
        p = rollup_progress.c
        conn.execute(delete(rollup_progress).where(p.device_id == 2, p.step_s == 3600))
        conn.execute(
            update(rollup_progress)
            .where(p.device_id == 2, p.step_s == 60)
            .values(rolled_until_ns=END + 2 * DAY)
        )
    assert RollupJob(engine, owner="roller").run_once(now_ns=NOW + 3 * DAY).ran
    again = rollups(engine, 2)
    assert again["progress 60"] == END + 2 * DAY and again["progress 3600"] == (END + 2 * DAY) // HOUR * HOUR
    hours = [k for k in made if k.startswith(("('gpu', 3600,", "('host', 3600,"))]
    assert len(hours) == 3 * 3, "two GPUs and the host, three hours"
    assert_close(
        {k: v for k, v in made.items() if not k.startswith("progress")},
        {k: v for k, v in again.items() if k in made and not k.startswith("progress")},
    )
