"""How Citus plans what the dashboard asks (issue 30): a device's chart goes to the one worker that
holds the device (a router plan, one task), and the Fleet page's reads fan out to every shard in
parallel. Checked on the statements the query layer really issues: each is captured from the
engine and EXPLAINed with its own parameters on a real coordinator and two workers."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from fleetscope.collector.query.fleet import fleet_overview
from fleetscope.collector.query.series import device_series
from fleetscope.collector.storage.citus import DISTRIBUTED
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.writer import BatchWriter
from tests.collector.test_storage import _item, _register

NS = 10**9
_TASK_COUNT = re.compile(r"Task Count: (\d+)")
_DISTRIBUTED = re.compile(r"\b(" + "|".join(DISTRIBUTED) + r")\b")


@contextmanager
def statements(engine: Engine) -> Iterator[list[tuple[str, object]]]:
    """Every SELECT the engine sends while the block runs, with its parameters."""
    seen: list[tuple[str, object]] = []

    def grab(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and not executemany:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", grab)


def task_counts(engine: Engine, captured: list[tuple[str, object]]) -> list[tuple[int, str]]:
    """Citus' task count of each captured statement that reads a distributed table."""
    out = []
    with engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for sql, params in captured:
            if not _DISTRIBUTED.search(sql):
                continue
            cur.execute("EXPLAIN " + sql, params)
            plan = "\n".join(r[0] for r in cur.fetchall())
            counts = [int(n) for n in _TASK_COUNT.findall(plan)]
            assert counts, f"not a Citus plan:\n{plan}\nfor\n{sql}"
            out.append((max(counts), sql))
    return out


def test_a_devices_chart_is_routed_to_its_worker_and_the_fleet_fans_out(citus_url: str) -> None:
    engine = make_engine(citus_url)  # migrated and distributed, 4 shards a table over two workers
    writer = BatchWriter(engine)
    writer.start()
    try:
        now = time.time_ns()
        names = [f"gpu-node-{i}" for i in range(6)]  # enough devices for several shards
        for name in names:
            device_id = _register(engine, name)
            for seq in range(1, 4):
                writer.submit(_item(device_id, seq, now - (4 - seq) * NS, name=name)).result(30)
        with statements(engine) as chart, Session(engine) as session:
            series = device_series(session=session, device="gpu-node-3", since_ns=now - 3600 * NS, until_ns=now + NS)
        assert len(series.host.columns["ts_ns"]) > 0, "the chart has the device's samples"
        routed = task_counts(engine, chart)
        assert len(routed) >= 2, "the chart reads the device's GPU and host tables"
        fanned = [sql for n, sql in routed if n != 1]
        assert not fanned, f"a device's chart statement ran on more than one shard: {fanned[0]}"

        with statements(engine) as fleet, Session(engine) as session:
            overview = fleet_overview(session=session, now_ns=now + NS)
        assert {d.name for d in overview.devices} >= set(names)
        spread = task_counts(engine, fleet)
        assert any(n == 4 for n, _ in spread), "the Fleet page reads every shard in one statement, in parallel"
    finally:
        writer.stop()
        engine.dispose()
