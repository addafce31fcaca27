"""fleetscope on Citus under the faults of a cluster (issue 30): a worker stopped for 20 s while
agents stream, the coordinator restarted. Real agents with on-disk spools, a collector process,
and a cluster of the test's own (``tests/citus_cluster.private_cluster``: the shared one serves
the other tests at the same time, and they must not see its nodes stop). And a compactor
SIGKILLed in the middle of a distributed compaction pass (on the shared cluster: no node stops).

What a user checks: every sample each device produced is stored exactly once when the node is
back, and the agents held (spooled) what the collector could not store meanwhile; after the
killed pass and the next compactor's, every sample is read back exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from fleetscope.collector.storage.chunk_codec import decode_chunk
from fleetscope.collector.storage.engine import make_engine
from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent

pytestmark = pytest.mark.processes

DEVICES = ("drone-a", "server-b", "server-c")
PER_DEVICE = 6_000


@pytest.fixture
def cluster() -> Iterator:
    from tests.citus_cluster import citus_installed, private_cluster

    missing = citus_installed()
    if missing:
        if os.environ.get("FLEETSCOPE_REQUIRE_CITUS"):
            pytest.fail(f"Citus must be tested for real here: {missing}")
        pytest.skip(missing)
    made = private_cluster()
    try:
        yield made
    finally:
        made.destroy()


def stored_sequence_numbers(db_url: str, device: str) -> list[int]:
    """The sequence numbers (``energy_j``) stored for ``device``, tail rows and chunks, each
    read by a query routed to the device's worker (its id named)."""
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            device_id = conn.execute(text("SELECT id FROM devices WHERE name = :n"), {"n": device}).scalar()
            if device_id is None:
                return []
            out = [int(v) for v in conn.execute(
                text("SELECT energy_j FROM gpu_samples WHERE device_id = :d"), {"d": device_id}).scalars()]
            for data in conn.execute(text("SELECT data FROM gpu_chunks WHERE device_id = :d"), {"d": device_id}).scalars():
                _ts, values, _texts = decode_chunk(bytes(data))
                out.extend(int(v) for v in values["energy_j"].tolist() if v == v)
            return out
    finally:
        engine.dispose()


def worker_ports(db_url: str) -> dict[str, int]:
    """{device: the port of the worker that holds its rows}."""
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            return {name: port for name, port in conn.execute(text(
                "SELECT d.name, n.nodeport FROM devices d"
                " JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('gpu_chunks', d.id)"
                " JOIN pg_dist_node n ON n.groupid = p.groupid"))}
    finally:
        engine.dispose()


def _stream_through(tmp_path: Path, cluster, collector_process, fault) -> str:  # type: ignore[no-untyped-def]
    """Agents stream into a collector on ``cluster``; ``fault(agents by device name, db_url,
    release)`` runs mid-stream; then every device's samples must be stored exactly once. Returns
    the database's URL.

    The samplers hold at a third of their rows until the fault calls ``release()``: on a loaded
    machine (the whole suite beside it) the first acknowledgements came after every row was
    produced, and the fault landed after the stream instead of inside it."""
    db_url = cluster.create_database()
    c = collector_process(db_url).start()  # its start-up upgrade distributes the schema
    samplers = {name: CountingSampler(total=PER_DEVICE, per_tick=20, hold_at=PER_DEVICE // 3) for name in DEVICES}

    def release() -> None:
        for s in samplers.values():
            s.release()
    agents = [make_agent(tmp_path, [c.address], s, name=name) for name, s in samplers.items()]
    for agent in agents:
        agent.start()
    try:
        wait_until(lambda: all(a.uplink.status.acked >= 10 for a in agents), timeout_s=60, message="first acknowledgements")
        at_fault = {name: s.produced for name, s in samplers.items()}
        try:
            fault(dict(zip(DEVICES, agents, strict=True)), db_url, release)
        finally:
            release()
        wait_until(lambda: all(s.done() for s in samplers.values()), timeout_s=120, message="all samples produced")
        wait_until(lambda: all(len(stored_sequence_numbers(db_url, n)) >= PER_DEVICE for n in DEVICES),
                   timeout_s=120, message="all samples stored")
    finally:
        for agent in agents:
            agent.stop()
        c.stop()
    for name in DEVICES:
        assert 0 < at_fault[name] < PER_DEVICE, "the fault must land mid-stream"
        assert sorted(stored_sequence_numbers(db_url, name)) == list(range(PER_DEVICE)), f"{name}: every sample exactly once"
    return db_url


def test_a_worker_stopped_for_20_s_while_agents_stream_loses_and_doubles_nothing(
    tmp_path: Path, cluster, collector_process  # type: ignore[no-untyped-def]
) -> None:
    """And while one worker is stopped, the devices on the other one go on being stored: a batch
    commits on its device's worker alone, and the device rows (on every node) are written apart."""
    acked_during_stop: dict[str, int] = {}
    ports: dict[str, int] = {}

    def stop_a_worker(agents, db_url: str, release) -> None:  # type: ignore[no-untyped-def]
        ports.update(worker_ports(db_url))
        cluster.stop_node(1)
        try:
            time.sleep(5)  # the collector's first failed writes to the stopped worker are behind
            before = {name: a.uplink.status.acked for name, a in agents.items()}
            release()  # rows produced inside the window, to be stored (or held) inside it
            time.sleep(15)
            acked_during_stop.update({name: a.uplink.status.acked - before[name] for name, a in agents.items()})
        finally:
            cluster.start_node(1)

    _stream_through(tmp_path, cluster, collector_process, stop_a_worker)
    stopped = {name for name, port in ports.items() if port == cluster.ports[1]}
    running = set(DEVICES) - stopped
    assert stopped and running, f"devices on both workers: {ports}"
    assert all(acked_during_stop[name] == 0 for name in stopped), acked_during_stop
    assert all(acked_during_stop[name] >= 5 for name in running), (
        f"devices on the running worker were stored while the other was stopped: {acked_during_stop}")


def test_the_coordinator_restarted_while_agents_stream_loses_and_doubles_nothing(
    tmp_path: Path, cluster, collector_process  # type: ignore[no-untyped-def]
) -> None:
    def restart_the_coordinator(_agents, _db_url: str, release) -> None:  # type: ignore[no-untyped-def]
        cluster.stop_node(0)
        release()
        time.sleep(5)
        cluster.start_node(0)

    _stream_through(tmp_path, cluster, collector_process, restart_the_coordinator)


# ------------------------------------------------------------------ a compactor killed mid-pass

HOUR_NS = 3600 * 10**9
KILL_DEVICES = tuple(range(1, 7))  # device ids; the pass folds them in this order, GPUs then host
STALLED = 5  # the device whose first window the doomed compactor is killed inside
GPUS = 2
STEP_NS = 120 * 10**9
SPAN_H = 12
LEASE_S = 3.0  # the compactors' share lease: the successor takes the dead one's shares over after it

COMPACTOR = textwrap.dedent("""
    # The compaction job alone, as a collector runs it (``CompactionJob.start``: a pass every
    # interval, shares leased per device), with a short interval and lease so that the test does
    # not wait the collector's minute for a pass and two for a dead holder's shares.
    import signal, sys, threading
    from fleetscope.collector.jobs.compaction import CompactionJob
    from fleetscope.collector.storage.engine import make_engine

    engine = make_engine(sys.argv[1], create=False)
    job = CompactionJob(engine, owner=sys.argv[2], interval_s=0.2, lease_s=float(sys.argv[3]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    job.start()
    while not stop.wait(0.2):
        pass
    job.stop()
    engine.dispose()
""")


def _start_compactor(tmp_path: Path, db_url: str, owner: str) -> subprocess.Popen:
    script = tmp_path / "compactor.py"
    script.write_text(COMPACTOR)
    log = open(tmp_path / f"{owner}.log", "wb")  # noqa: SIM115 - the child keeps its own copy
    try:
        return subprocess.Popen(
            [sys.executable, str(script), f"{db_url}?application_name={owner}", owner, str(LEASE_S)],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    finally:
        log.close()


def _seed(engine: Engine) -> dict[int, tuple[list, list]]:
    """SPAN_H hours of GPU (GPUS each) and host samples of every device, in the tail, ending two
    hours ago (old enough to fold); the minute rollups run over them as a collector's would."""
    from sqlalchemy import insert

    from fleetscope.collector.jobs.rollup import RollupJob
    from fleetscope.collector.storage.schema import Device, gpu_samples, host_samples
    from tests.collector.test_compaction import gpu_row, host_row

    end = time.time_ns() // HOUR_NS * HOUR_NS - 2 * HOUR_NS
    start = end - SPAN_H * HOUR_NS + 17 * 60 * 10**9  # 17 minutes into an hour: a partial first window
    seeded: dict[int, tuple[list, list]] = {}
    with engine.begin() as conn:
        conn.execute(insert(Device.__table__), [
            {"id": d, "agent_id": f"agent-{d}", "name": f"dev-{d}", "kind": "server", "first_seen_ns": start,
             "last_seen_ns": end} for d in KILL_DEVICES])
    for d in KILL_DEVICES:
        times = [ts + (i * 7919 + d) % 1000 * 1000 for i, ts in enumerate(range(start, end, STEP_NS))]
        g = [gpu_row(d, k, ts, i) for i, ts in enumerate(times) for k in range(GPUS)]
        h = [host_row(d, ts, i) for i, ts in enumerate(times)]
        seeded[d] = (g, h)
    with engine.begin() as conn:
        conn.execute(insert(gpu_samples), [r for g, _ in seeded.values() for r in g])
        conn.execute(insert(host_samples), [r for _, h in seeded.values() for r in h])
    roller = RollupJob(engine, owner="roller")
    roller.run_once()
    roller.release()
    return seeded


def _windows(engine: Engine, boundary: dict[int, int]) -> dict[str, dict]:
    """What the tail and chunk tables hold, per (kind, device, window start): tail rows, and the
    chunks as (gpu_index, rows, start_ns, end_ns); and each device's windows wholly below its
    fold boundary (those a pass folds)."""
    out: dict[str, dict] = {"tail": {}, "chunks": {}, "foldable": {}}
    with engine.connect() as conn:
        for kind, gpu in (("gpu", "gpu_index"), ("host", "0")):
            for d, w, n in conn.execute(text(
                    f"SELECT device_id, ts_ns - ts_ns % {HOUR_NS}, count(*) FROM {kind}_samples"
                    " GROUP BY 1, 2")):
                out["tail"][(kind, d, w)] = n
            for d, g, rows, lo, hi in conn.execute(text(
                    f"SELECT device_id, {gpu}, rows, start_ns, end_ns FROM {kind}_chunks ORDER BY 1, 2, 4")):
                out["chunks"].setdefault((kind, d, lo - lo % HOUR_NS), []).append((g, rows, lo, hi))
    for kind, d, w in {*out["tail"], *out["chunks"]}:
        if w + HOUR_NS <= boundary[d]:
            out["foldable"].setdefault((kind, d), set()).add(w)
    return out


def _reads(engine: Engine, start: int, end: int) -> dict:
    """What the dashboard reads of every device over the whole span: raw samples and the chart
    at a raw step, and the stored counts."""
    from fleetscope.collector.query import device_metrics, device_series, session_scope
    from fleetscope.collector.query.samples import count_samples

    out = {}
    with session_scope(engine) as s:
        for d in KILL_DEVICES:
            out[f"metrics {d}"] = device_metrics(session=s, device=f"dev-{d}", since_ns=start, until_ns=end)
            out[f"series {d}"] = device_series(session=s, device=f"dev-{d}", since_ns=start, until_ns=end,
                                               step_s=30, latency=False)
            out[f"count {d}"] = count_samples(session=s, device=f"dev-{d}")
    return out


def _leases(engine: Engine) -> dict[str, tuple[str, int]]:
    with engine.connect() as conn:
        return {n: (o, int(e)) for n, o, e in conn.execute(text(
            "SELECT name, owner, expires_ns FROM leases WHERE name LIKE 'compaction/%'"))}


def _waits(engine: Engine, blocked: str, blocking: str) -> bool:
    """Whether a statement that starts with ``blocked`` waits for a lock held by one that starts
    with ``blocking``, on any node (``citus_lock_waits``: the cluster's lock graph)."""
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM citus_lock_waits WHERE blocked_statement LIKE :a"
            " AND current_statement_in_blocking_process LIKE :b"), {"a": blocked + "%", "b": blocking + "%"}).scalar_one())


def _backends(engine: Engine, owner: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :o"),
                                {"o": owner}).scalar_one())


def test_a_compactor_killed_inside_a_distributed_pass_loses_and_doubles_nothing(tmp_path: Path, citus_url: str) -> None:
    """Six devices over both workers, 12 hours of GPU and host samples each in the tail; a
    compaction pass SIGKILLed in the middle: devices 1-4 folded, device 5's first window with its
    tail rows deleted and its chunk inserted, not committed (its share's renewal waits for a lock
    the test holds), device 6 not yet begun. Nothing of that window may survive the kill, and a
    second compactor, once the dead one's shares expire, folds the rest: every sample of every
    device read back exactly once, one chunk per GPU and window, no tail row left in a folded one."""
    from fleetscope.collector.jobs.compaction import CompactionJob
    from fleetscope.collector.storage.shares import JOB_SHARES, share_lease_name, share_of
    from tests.collector.test_compaction import assert_same_answers

    engine = make_engine(citus_url)  # distributes the schema
    doomed = successor = None
    row_lock = lease_lock = None
    try:
        seeded = _seed(engine)
        start = min(r["ts_ns"] for g, _ in seeded.values() for r in g)
        end = max(r["ts_ns"] for g, _ in seeded.values() for r in g) + 1
        with engine.connect() as conn:
            nodes = dict(conn.execute(text(
                "SELECT d.id, n.nodeport FROM devices d"
                " JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('gpu_samples', d.id)"
                " JOIN pg_dist_node n ON n.groupid = p.groupid")).all())
            boundary = CompactionJob(engine, owner="probe").boundaries(conn, time.time_ns())
            progress = conn.execute(text("SELECT device_id, step_s, rolled_until_ns FROM rollup_progress ORDER BY 1, 2")).all()
        assert len(set(nodes.values())) == 2, f"devices on both workers: {nodes}"
        assert len({nodes[d] for d in KILL_DEVICES if d < STALLED}) == 2, "folded devices on both workers"
        assert len({nodes[d] for d in KILL_DEVICES if d >= STALLED}) >= 1
        before = _reads(engine, start, end)
        initial = _windows(engine, boundary)
        assert not initial["chunks"]
        foldable = initial["foldable"]
        assert all(len(foldable[(k, d)]) >= SPAN_H - 2 for k in ("gpu", "host") for d in KILL_DEVICES), foldable
        assert any(w + HOUR_NS > boundary[d] for (_k, d, w) in initial["tail"]), "the newest window stays in the tail"

        # The kill lands inside a window's transaction, after its deletes and its insert, at the
        # last statement before its commit (the renewal of the device's share: ``renew_in``):
        # the test holds a row of dev-STALLED's first window, so the pass folds devices 1-4 and
        # waits in that window's DELETE; then the test holds the device's share (an UPDATE of its
        # lease row; Citus serialises the UPDATEs of a reference table on its shard anyway) and
        # lets the DELETE go: the window's tail rows are deleted, its chunk inserted, and its
        # renewal waits. SIGKILL there.
        first = min(foldable[("gpu", STALLED)])
        stalled_share = share_lease_name("compaction", share_of(STALLED))
        row_lock = engine.connect()
        row_lock.begin()
        locked = row_lock.execute(text(
            "SELECT ts_ns FROM gpu_samples WHERE device_id = :d AND ts_ns >= :lo AND ts_ns < :hi"
            " ORDER BY ts_ns DESC LIMIT 1 FOR UPDATE"), {"d": STALLED, "lo": first, "hi": first + HOUR_NS}).all()
        assert len(locked) == 1
        doomed = _start_compactor(tmp_path, citus_url, "doomed")

        def stalled(statement: str, on: str) -> bool:
            assert doomed is not None and doomed.poll() is None, (tmp_path / "doomed.log").read_text()
            return _waits(engine, statement, on)

        wait_until(lambda: stalled("WITH taken AS (DELETE FROM gpu_samples", "SELECT ts_ns FROM gpu_samples"),
                   timeout_s=120, interval_s=0.05, message=f"the doomed compactor waiting in the first window of dev-{STALLED}")
        lease_lock = engine.connect()
        lease_lock.begin()
        lease_lock.execute(text("UPDATE leases SET owner = owner WHERE name = :n"), {"n": stalled_share})
        row_lock.rollback()
        row_lock.close()
        wait_until(lambda: stalled("UPDATE leases SET expires_ns", "UPDATE leases SET owner = owner"),
                   timeout_s=30, interval_s=0.05, message="the doomed compactor waiting to commit the window")
        doomed.kill()
        doomed.wait(10)
        lease_lock.rollback()
        lease_lock.close()
        # The killed client's backends end (the waiting one when its statement returns to nobody),
        # and its open transaction with them.
        wait_until(lambda: _backends(engine, "doomed") == 0, timeout_s=30, message="the killed compactor's backends gone")
        mid = _windows(engine, boundary)
        done = sum(len(cs) for cs in mid["chunks"].values())
        assert 0 < done < sum(len(ws) for ws in foldable.values()) * GPUS, "the kill landed mid-pass"
        for d in KILL_DEVICES:
            for kind in ("gpu", "host"):
                seeded_rows = len(seeded[d][0 if kind == "gpu" else 1])
                stored = sum(n for (k, dd, _w), n in mid["tail"].items() if (k, dd) == (kind, d)) + sum(
                    c[1] for (k, dd, _w), cs in mid["chunks"].items() if (k, dd) == (kind, d) for c in cs)
                assert stored == seeded_rows, f"dev-{d} {kind}: {stored} rows stored after the kill, {seeded_rows} seeded"
                folded = {w for (k, dd, w) in mid["chunks"] if (k, dd) == (kind, d)}
                in_tail = {w for (k, dd, w) in mid["tail"] if (k, dd) == (kind, d)} & foldable[(kind, d)]
                if d < STALLED:
                    assert folded == foldable[(kind, d)] and not in_tail, f"dev-{d} {kind} folded before the kill"
                else:  # the stalled window rolled back with the killed client; the rest never begun
                    assert not folded and in_tail == foldable[(kind, d)], f"dev-{d} {kind} untouched by the kill"
        shares_at_kill = {n: v for n, v in _leases(engine).items() if "/share/" in n}
        assert len(shares_at_kill) == JOB_SHARES and all(o == "doomed" for o, _e in shares_at_kill.values()), (
            f"the dead compactor's shares, for the successor to take over: {shares_at_kill}")
        assert_same_answers(before, _reads(engine, start, end))

        # A second compactor takes the dead one's shares over once they expire, and folds the rest.
        successor = _start_compactor(tmp_path, citus_url, "successor")

        def all_folded() -> bool:
            assert successor is not None and successor.poll() is None, (tmp_path / "successor.log").read_text()
            now_ns = time.time_ns()
            held = [n for n, (o, e) in _leases(engine).items() if "/share/" in n and o == "successor" and e >= now_ns]
            if len(held) < JOB_SHARES:  # every share taken over from the dead compactor
                return False
            now = _windows(engine, boundary)
            return all(not (ws & {w for (k, dd, w) in now["tail"] if (k, dd) == key})
                       for key, ws in foldable.items())

        wait_until(all_folded, timeout_s=60, interval_s=0.5, message="the successor's compaction")
        successor.send_signal(signal.SIGTERM)
        assert successor.wait(30) == 0, (tmp_path / "successor.log").read_text()

        final = _windows(engine, boundary)
        for (kind, d, w), n in initial["tail"].items():
            chunks = final["chunks"].get((kind, d, w), [])
            if w in foldable[(kind, d)]:
                assert (kind, d, w) not in final["tail"], f"dev-{d} {kind} {w}: tail rows left in a folded window"
                assert sorted(c[0] for c in chunks) == (list(range(GPUS)) if kind == "gpu" else [0]), (
                    f"dev-{d} {kind} {w}: one chunk per GPU, none doubled: {chunks}")
                assert sum(c[1] for c in chunks) == n, f"dev-{d} {kind} {w}: the window's rows, once"
                assert all(w <= c[2] <= c[3] < w + HOUR_NS for c in chunks)
            else:
                assert final["tail"].get((kind, d, w)) == n and not chunks, f"dev-{d} {kind} {w}: not foldable yet"
        assert set(final["chunks"]) <= {(k, d, w) for (k, d), ws in foldable.items() for w in ws}

        # What a user reads: every sample of every device exactly once, with its values.
        after = _reads(engine, start, end)
        assert_same_answers(before, after)
        for d in KILL_DEVICES:
            g, h = seeded[d]
            got = after[f"metrics {d}"]
            assert [(p.ts_ns, p.gpu_index, p.values["energy_j"]) for p in got.gpu] == sorted(
                (r["ts_ns"], r["gpu_index"], r["energy_j"]) for r in g), f"dev-{d}: every GPU sample once"
            assert [(p.ts_ns, p.values["disk_used_bytes"]) for p in got.host] == sorted(
                (r["ts_ns"], r["disk_used_bytes"]) for r in h), f"dev-{d}: every host sample once"
            assert (after[f"count {d}"]["gpu"], after[f"count {d}"]["host"]) == (len(g), len(h))

        # The marks: the rollups' progress untouched, every share with the successor and given up
        # on its stop, the dead compactor's membership expired.
        with engine.connect() as conn:
            assert conn.execute(text(
                "SELECT device_id, step_s, rolled_until_ns FROM rollup_progress ORDER BY 1, 2")).all() == progress
        marks = _leases(engine)
        shares = {n: v for n, v in marks.items() if "/share/" in n}
        assert len(shares) == JOB_SHARES and all(v == ("successor", 0) for v in shares.values()), shares
        now_ns = time.time_ns()
        assert not [n for n, (o, e) in marks.items() if o == "doomed" and e >= now_ns], marks
        with engine.connect() as conn:  # no transaction of the killed compactor left in doubt on any node
            assert conn.execute(text(
                "SELECT array_agg(result) FROM run_command_on_all_nodes("
                "'SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()')")).scalar_one() == [
                    "0", "0", "0"]
    finally:
        for held in (row_lock, lease_lock):
            if held is not None:
                held.close()
        for proc in (doomed, successor):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        engine.dispose()


# ------------------------------------------------------------------ registering while a worker is stopped


def test_a_known_agent_registers_again_while_a_worker_is_stopped(cluster) -> None:  # type: ignore[no-untyped-def]
    """A collector restarted (or its agents moved to another) while a worker is down: its agents
    register again. Their device and stream rows are known, so the registration writes nothing on
    every node (``deferred_liveness``) and succeeds; the device row's last-seen time and skew are
    written once every node is back."""
    from fleetscope.collector.storage.migrations import upgrade
    from fleetscope.collector.storage.registry import register_device
    from fleetscope.collector.storage.writer import BatchWriter
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    db_url = cluster.create_database()
    engine = make_engine(db_url, create=False)
    upgrade(engine)
    writer = BatchWriter(engine)
    writer.start()
    try:
        req = pb.RegisterRequest(agent_id="agent-drone", boot_id="boot-1", name="drone", kind=pb.DEVICE_KIND_JETSON)
        first = register_device(engine, req, received_ns=1_000, liveness=writer.liveness)
        cluster.stop_node(1)
        try:
            req.sent_ns = 4_000
            again = register_device(engine, req, received_ns=5_000, liveness=writer.liveness)
            assert again.device_id == first.device_id and again.clock_skew_ns == 1_000
            assert writer.flush_liveness()  # tried while the worker is down: kept, not lost
            assert writer.liveness.failures >= 1 and writer.liveness.pending == 2
        finally:
            cluster.start_node(1)
        wait_until(lambda: writer.flush_liveness() and writer.liveness.pending == 0, timeout_s=30,
                   message="the deferred liveness written once the worker is back")
        with engine.connect() as conn:
            device = conn.execute(text("SELECT last_seen_ns, clock_skew_ns FROM devices WHERE id = :d"),
                                  {"d": first.device_id}).one()
            stream = conn.execute(text("SELECT last_seen_ns, clock_skew_ns FROM streams WHERE agent_id = 'agent-drone'")).one()
        assert tuple(device) == (5_000, 1_000) and tuple(stream) == (5_000, 1_000)
    finally:
        writer.stop()
        engine.dispose()
