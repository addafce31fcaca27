"""A registration storm (every agent registering again after a restart or a failover) against a
real collector over loopback on a real SQLite file whose write lock another process holds, as a
slow or failing-over registry would: registrations are written a few at a time, one whose
caller's deadline passed while it waited is never written, and beyond the waiting room callers
are refused at once with a retry-after instead of queueing."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import grpc
import pytest

from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.collector.test_observability import scrape, value
from tests.conftest import wait_until

TOKEN = "test-token"
pytestmark = pytest.mark.server


def register_call(addr: str, agent_id: str, timeout_s: float) -> tuple[grpc.StatusCode, dict[str, str], float]:
    """One Register call: its status code, trailing metadata and how long it took."""
    began = time.monotonic()
    with grpc.insecure_channel(addr) as channel:
        call = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
        req = pb.RegisterRequest(agent_id=agent_id, boot_id="boot-1", name=agent_id, hostname="h", sent_ns=time.time_ns())
        try:
            call(req, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=timeout_s)
            return grpc.StatusCode.OK, {}, time.monotonic() - began
        except grpc.RpcError as exc:
            return exc.code(), dict(exc.trailing_metadata() or ()), time.monotonic() - began


def device_rows(db: Path, agent_id: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute("SELECT count(*) FROM devices WHERE agent_id = ?", (agent_id,)).fetchone()[0])


class HeldWriteLock:
    """Another connection's write transaction on the database: registrations wait on it."""

    def __init__(self, db: Path) -> None:
        self._conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


@pytest.fixture
def gated(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = tmp_path / "fleet.db"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=f"sqlite:///{db}", tokens=frozenset([TOKEN]),
                                            metrics_listen="127.0.0.1:0", detectors=None, rollups=False, compaction=False,
                                            max_registrations_in_flight=1))
    port = collector.start()
    try:
        yield collector, f"127.0.0.1:{port}", db
    finally:
        collector.stop()


def in_thread(results: dict, key: str, *args: object) -> threading.Thread:
    t = threading.Thread(target=lambda: results.__setitem__(key, register_call(*args)), daemon=True)  # type: ignore[arg-type]
    t.start()
    return t


def test_a_registration_whose_deadline_passes_while_it_waits_is_never_written(gated) -> None:  # type: ignore[no-untyped-def]
    collector, addr, db = gated
    mport = collector.observability.metrics_port
    assert register_call(addr, "warm-up", 10)[0] == grpc.StatusCode.OK  # the schema and pool are ready
    lock = HeldWriteLock(db)
    results: dict = {}
    try:
        holder = in_thread(results, "holder", addr, "holder", 20.0)
        wait_until(lambda: value(scrape(mport), "fleetscope_collector_registrations_in_flight") == 1, timeout_s=10,
                   message="the first registration to take the only slot")
        late = in_thread(results, "late", addr, "late", 1.5)
        late.join(10)
        assert results["late"][0] == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        lock.release()
    holder.join(30)
    assert results["holder"][0] == grpc.StatusCode.OK
    # Give a queued write every chance to land: without the gate it would, after the lock went.
    assert register_call(addr, "after", 10)[0] == grpc.StatusCode.OK
    assert device_rows(db, "holder") == 1 and device_rows(db, "after") == 1
    assert device_rows(db, "late") == 0, "written for an agent that had stopped waiting"
    metrics = scrape(mport)
    assert value(metrics, "fleetscope_collector_registrations_shed_total", reason="expired") == 1
    assert value(metrics, "fleetscope_collector_registrations_in_flight") == 0


def test_beyond_the_waiting_room_registrations_are_refused_at_once_with_a_retry_after(gated) -> None:  # type: ignore[no-untyped-def]
    collector, addr, db = gated
    mport = collector.observability.metrics_port
    gate = collector._service.registrations  # noqa: SLF001  # its sizes, to fill it exactly
    assert register_call(addr, "warm-up", 10)[0] == grpc.StatusCode.OK
    lock = HeldWriteLock(db)
    results: dict = {}
    threads = []
    try:
        threads.append(in_thread(results, "a-0", addr, "a-0", 30.0))
        wait_until(lambda: value(scrape(mport), "fleetscope_collector_registrations_in_flight") == 1, timeout_s=10,
                   message="the slot taken")
        for i in range(1, 1 + gate.max_waiting):
            threads.append(in_thread(results, f"a-{i}", addr, f"a-{i}", 30.0))
        wait_until(lambda: value(scrape(mport), "fleetscope_collector_registrations_waiting") == gate.max_waiting,
                   timeout_s=10, message="the waiting room full")
        code, trailing, took = register_call(addr, "one-too-many", 30.0)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert took < 5.0, "refused at once, not after waiting"
        assert float(trailing["retry-after"]) >= 1.0
    finally:
        lock.release()
    for t in threads:
        t.join(60)
    assert [results[f"a-{i}"][0] for i in range(1 + gate.max_waiting)] == [grpc.StatusCode.OK] * (1 + gate.max_waiting)
    assert device_rows(db, "one-too-many") == 0
    assert value(scrape(mport), "fleetscope_collector_registrations_shed_total", reason="queue_full") == 1
    # The refused agent, retrying after the storm, gets in.
    assert register_call(addr, "one-too-many", 10)[0] == grpc.StatusCode.OK


def test_a_caller_gone_mid_write_keeps_its_slot_until_the_write_ends(gated) -> None:  # type: ignore[no-untyped-def]
    collector, addr, db = gated
    mport = collector.observability.metrics_port
    assert register_call(addr, "warm-up", 10)[0] == grpc.StatusCode.OK
    lock = HeldWriteLock(db)
    try:
        # Admitted at once, then stuck on the lock past its own deadline: gRPC cancels its handler.
        assert register_call(addr, "gone", 1.5)[0] == grpc.StatusCode.DEADLINE_EXCEEDED
        # Its thread is still waiting to write: the slot is still its, so the next one waits too.
        assert value(scrape(mport), "fleetscope_collector_registrations_in_flight") == 1
        assert register_call(addr, "next", 1.5)[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        lock.release()
    wait_until(lambda: value(scrape(mport), "fleetscope_collector_registrations_in_flight") == 0, timeout_s=30,
               message="the slot given back when the write ended")
    assert device_rows(db, "next") == 0
    assert value(scrape(mport), "fleetscope_collector_registrations_shed_total", reason="expired") == 1
    assert register_call(addr, "next", 10)[0] == grpc.StatusCode.OK
