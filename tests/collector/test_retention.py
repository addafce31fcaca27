"""The retention job (jobs.retention) on a real SQLite file and a real PostgreSQL server: each
tier deletes exactly what is older than it keeps (PostgreSQL by dropping whole day partitions,
SQLite in batches), an incident's samples outlive the raw tier and its page still shows them,
ingest keeps committing while retention runs, one collector at a time runs it, and the flag's
bad values are one line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from fleetscope.collector.jobs.retention import RetentionJob, RetentionSettings, describe, parse_retention
from fleetscope.collector.query import incident_with_context
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.citus import is_citus
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.partitions import day_start_ns, ensure_partitions_ahead
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.writer import BatchWriter
from fleetscope.proto import vocabulary
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.collector.test_partitions import _batch_item

NS = 10**9
DAY = 86_400 * NS
# On a day boundary, so that the raw cutoff (7 days back) is one too and PostgreSQL's partition
# drops are exactly the rows older than it, as SQLite's deletes are.
NOW = day_start_ns(1_796_300_000 * NS)
RAW_CUTOFF = NOW - 7 * DAY


def _count(engine: Engine, sql: str, **params: int) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def _samples(engine: Engine, kind: str = "gpu", *, lo: int = 0, hi: int = 2**63 - 1) -> int:
    """How many raw samples of every device are stored with ``lo <= ts_ns < hi``, wherever they
    sit: the chunks the writer stores and the tail rows a test (or an older collector) inserted."""
    with engine.connect() as conn:
        ids = [int(r[0]) for r in conn.execute(text("SELECT id FROM devices")).all()]
        return len(read_samples(conn, kind, ids, lo, hi, columns=()))


def _device(engine: Engine, name: str = "dev-r") -> int:
    req = pb.RegisterRequest(agent_id=f"id-{name}", boot_id="boot", name=name, sent_ns=NOW)
    return register_device(engine, req, received_ns=NOW).device_id


def _incident(conn, device_id: int, ts_ns: int, *, state: str = "resolved", last_seen_s: int = 30) -> int:  # type: ignore[no-untyped-def]
    last = ts_ns + last_seen_s * NS
    conn.execute(text(
        "INSERT INTO incidents (device_id, ts_ns, received_ns, kind, severity, title, facts, source, excerpt, context,"
        " gpu_index, process_name, group_key, state, origin, count, last_seen_ns, ended_ns, updated_ns, hints)"
        " VALUES (:d, :t, :t, :k, 'error', 'oom', '{}', '', '', '{}', 0, '', '', :s, 'agent', 1, :l, :e, :t, '[]')"
    ), {"d": device_id, "t": ts_ns, "k": vocabulary.KIND_CUDA_OOM, "s": state, "l": last,
        "e": None if state == "open" else last})
    return int(conn.execute(text("SELECT max(id) FROM incidents")).scalar_one())


def _fill(engine: Engine, device_id: int) -> dict[str, int]:
    """Ten days of samples (one a minute), denser around an incident 9 days back, and rows of
    every other tier either side of its cutoff. Returns the incident ids."""
    ensure_partitions_ahead(engine, NOW - 10 * DAY, days_ahead=11)
    with engine.begin() as conn:
        rows = [{"d": device_id, "t": NOW - 10 * DAY + i * 60 * NS} for i in range(10 * 24 * 60)]
        old_incident = NOW - 9 * DAY + 3600 * NS
        rows += [{"d": device_id, "t": old_incident - 120 * NS + i * 5 * NS + 1} for i in range(48)]
        rows.append({"d": device_id, "t": NOW - 100 * DAY})  # long ago: PostgreSQL's default partition
        conn.execute(text("INSERT INTO gpu_samples (device_id, ts_ns, gpu_index, temp_c) VALUES (:d, :t, 0, 60)"), rows)
        conn.execute(text("INSERT INTO host_samples (device_id, ts_ns, cpu_percent, cpu_cores) VALUES (:d, :t, 10, '[[1, 2]]')"), rows)
        for ts in (NOW - 8 * DAY, NOW - DAY):
            conn.execute(text("INSERT INTO metric_points VALUES (:d, :t, 'm', 1.0, '{}')"), {"d": device_id, "t": ts})
            conn.execute(text("INSERT INTO latency_histograms VALUES (:d, :t, :e, 'op', '{}', 1, 1, 0, 0, '{}', 0)"),
                         {"d": device_id, "t": ts, "e": ts + NS})
            conn.execute(text("INSERT INTO gpu_chunks VALUES (:d, 0, :t, :e, 1, 1, :b)"), {"d": device_id, "t": ts, "e": ts + 10 * NS, "b": b"x"})
        for ts in (NOW - 31 * DAY, NOW - 29 * DAY):
            conn.execute(text("INSERT INTO log_events VALUES (:d, :t, 'f', 'info', 'x')"), {"d": device_id, "t": ts})
        for step, age in ((60, 91), (60, 89), (3600, 731), (3600, 729), (86400, 5 * 365 + 1), (86400, 5 * 365 - 1)):
            conn.execute(text("INSERT INTO host_rollups (device_id, step_s, bucket_ns, n, span_ns) VALUES (:d, :s, :b, 1, 1)"),
                         {"d": device_id, "s": step, "b": NOW - age * DAY})
        # GPU state: the 9-day-old row is superseded before the cutoff; the 8-day-old one is in force at it.
        for age in (9, 8, 1):
            conn.execute(text("INSERT INTO gpu_state (device_id, ts_ns, gpu_index, memory_total_bytes) VALUES (:d, :t, 0, 1)"),
                         {"d": device_id, "t": NOW - age * DAY})
        for age, state in ((400, "resolved"), (300, "resolved"), (400, "firing")):
            conn.execute(text(
                "INSERT INTO alerts (rule, fingerprint, state, kind, severity, summary, labels, facts, pending_ns, resolved_ns,"
                " last_eval_ns) VALUES ('r', :f, :s, 'metric', 'warning', '', '{}', '{}', :t, :r, :t)"),
                {"f": f"{age}{state}", "s": state, "t": NOW - age * DAY, "r": None if state == "firing" else NOW - age * DAY})
        alert = int(conn.execute(text("SELECT id FROM alerts WHERE fingerprint = '400resolved'")).scalar_one())
        conn.execute(text(
            "INSERT INTO notifications (alert_id, transition, notifier, payload, state, attempts, created_ns, next_attempt_ns,"
            " last_error) VALUES (:a, 'firing', 'hook', '{}', 'delivered', 1, 0, 0, '')"), {"a": alert})
        note = int(conn.execute(text("SELECT id FROM notifications")).scalar_one())
        conn.execute(text("INSERT INTO notification_attempts (notification_id, ts_ns, ok, error, duration_ms)"
                          " VALUES (:n, 0, true, '', 1.0)"), {"n": note})
        return {
            "kept": _incident(conn, device_id, old_incident),
            "expired": _incident(conn, device_id, NOW - 800 * DAY),
            "open": _incident(conn, device_id, NOW - 800 * DAY, state="open"),
            "recent": _incident(conn, device_id, NOW - DAY),
        }


def _context(engine: Engine, incident_id: int):  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        ctx = incident_with_context(session=session, incident_id=incident_id)
    return ([(p.ts_ns, p.values["cpu_percent"], p.cpu_cores) for p in ctx.host],
            [(p.ts_ns, p.gpu_index, p.values["temp_c"]) for p in ctx.gpu])


def test_each_tier_deletes_exactly_what_it_no_longer_keeps_and_incidents_keep_their_samples(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        device_id = _device(engine)
        ids = _fill(engine, device_id)
        newer = {t: _count(engine, f"SELECT count(*) FROM {t} WHERE ts_ns >= :c", c=RAW_CUTOFF) for t in ("gpu_samples", "host_samples")}
        context_before = _context(engine, ids["kept"])
        assert len(context_before[0]) > 20 and len(context_before[1]) > 20

        job = RetentionJob(engine, RetentionSettings(batch_rows=500), clock=lambda: NOW)
        report = job.run_once()
        assert report.ran
        for t in ("gpu_samples", "host_samples"):
            assert _count(engine, f"SELECT count(*) FROM {t} WHERE ts_ns < :c", c=RAW_CUTOFF) == 0, t
            assert _count(engine, f"SELECT count(*) FROM {t} WHERE ts_ns >= :c", c=RAW_CUTOFF) == newer[t], t
        for t in ("metric_points", "gpu_chunks"):
            assert _count(engine, f"SELECT count(*) FROM {t}") == 1, t
        assert _count(engine, "SELECT count(*) FROM latency_histograms WHERE start_ns = :t", t=NOW - DAY) == 1
        assert _count(engine, "SELECT count(*) FROM log_events") == 1
        assert [r for r in _rows(engine, "SELECT step_s, bucket_ns FROM host_rollups ORDER BY 1, 2")] == [
            (60, NOW - 89 * DAY), (3600, NOW - 729 * DAY), (86400, NOW - (5 * 365 - 1) * DAY)]
        assert _rows(engine, "SELECT ts_ns FROM gpu_state ORDER BY 1") == [(NOW - 8 * DAY,), (NOW - DAY,)]
        assert sorted(r[0] for r in _rows(engine, "SELECT id FROM incidents")) == sorted(
            [ids["kept"], ids["open"], ids["recent"]]), "resolved and ended 2 years ago: gone; open: never"
        assert sorted(r[0] for r in _rows(engine, "SELECT fingerprint FROM alerts")) == ["300resolved", "400firing"]
        assert _count(engine, "SELECT count(*) FROM notifications") == 0
        assert _count(engine, "SELECT count(*) FROM notification_attempts") == 0
        if engine.dialect.name == "postgresql":
            assert report.dropped["gpu_samples"] == 3, "10, 9 and 8 days back: whole partitions dropped"
        # The incident 9 days back still shows the same samples around it.
        assert report.kept > 0
        assert _context(engine, ids["kept"]) == context_before
        again = job.run_once()
        assert again.kept == 0 and sum(again.deleted.values()) == 0 and not again.dropped
    finally:
        engine.dispose()


def _rows(engine: Engine, sql: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


def test_kept_samples_go_when_their_incident_does(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        device_id = _device(engine)
        ids = _fill(engine, device_id)
        RetentionJob(engine, RetentionSettings(), clock=lambda: NOW).run_once()
        assert _count(engine, "SELECT count(*) FROM incident_gpu_samples") > 0
        with engine.begin() as conn:  # only the incident 9 days back had samples to keep
            conn.execute(text("DELETE FROM incidents WHERE id <> :k"), {"k": ids["kept"]})
        later = NOW + 730 * DAY
        RetentionJob(engine, RetentionSettings(), clock=lambda: later).run_once()
        assert _count(engine, "SELECT count(*) FROM incidents") == 0
        assert _count(engine, "SELECT count(*) FROM incident_gpu_samples") == 0
        assert _count(engine, "SELECT count(*) FROM incident_host_samples") == 0
    finally:
        engine.dispose()


def test_ingest_keeps_committing_while_retention_deletes(db_url: str) -> None:
    engine = make_engine(db_url)
    now = time.time_ns()
    try:
        device_id = register_device(engine, pb.RegisterRequest(agent_id="id-part", boot_id="boot", name="part", sent_ns=now),
                                    received_ns=now).device_id
        ensure_partitions_ahead(engine, now - 10 * DAY, days_ahead=11)
        with engine.begin() as conn:  # 20,000 rows older than the raw tier
            conn.execute(text("INSERT INTO gpu_samples (device_id, ts_ns, gpu_index) VALUES (:d, :t, 0)"),
                         [{"d": device_id, "t": now - 9 * DAY + i * NS} for i in range(20_000)])
        writer = BatchWriter(engine)
        writer.start()
        stop = threading.Event()
        outcomes = []

        def ingest() -> None:
            seq = 0
            while not stop.is_set() or seq < 5:
                seq += 1
                outcomes.append(writer.submit(_batch_item(device_id, seq, now + seq * 100 * NS, 50)).result(60))

        t = threading.Thread(target=ingest)
        t.start()
        try:
            report = RetentionJob(engine, RetentionSettings(batch_rows=200), clock=lambda: now).run_once()
        finally:
            stop.set()
            t.join(120)
            writer.stop()
        assert report.ran
        assert all(o.rejection is None and not o.duplicate for o in outcomes) and len(outcomes) >= 5
        assert _samples(engine, hi=now - 7 * DAY) == 0
        assert _samples(engine, lo=now) == 50 * len(outcomes)
    finally:
        engine.dispose()


def test_one_collector_at_a_time_enforces_retention(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        a = RetentionJob(engine, owner="a", clock=lambda: NOW)
        b = RetentionJob(engine, owner="b", clock=lambda: NOW)
        assert a.run_once().ran
        other = b.run_once()
        assert not other.ran and other.holder == "a"
    finally:
        engine.dispose()


@pytest.mark.processes
def test_retention_spec_parses_and_refuses_bad_values_in_one_line() -> None:
    s = parse_retention("raw=7d,minute=90d,hour=2y,incidents=2y")
    assert (s.raw_s, s.minute_s, s.hour_s, s.incidents_s) == (7 * 86400, 90 * 86400, 730 * 86400, 730 * 86400)
    assert parse_retention("raw=12h, logs=off").logs_s is None
    assert describe(RetentionSettings()) == "raw=7d,minute=90d,hour=2y,day=5y,incidents=2y,logs=30d,alerts=1y"
    for bad in ("raw=7x", "raw", "bogus=1d", "raw=-1d", "raw=0d"):
        with pytest.raises(ValueError):
            parse_retention(bad)
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "collector", "--retention", "raw=7x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "fleetscope collector: error: argument --retention: raw: '7x' is not a duration: use a number and a unit "
        "(s, m, h, d, w, y), e.g. 7d, or 'off'")
    assert json.dumps(describe(s))


def _claims(engine: Engine) -> list[tuple]:
    return sorted(_rows(engine, "SELECT agent_id, boot_id, seq, received_ns FROM ingested_batches"))


def test_exactly_once_claims_older_than_the_raw_tier_are_deleted_in_batches_and_newer_ones_kept(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:  # 23 older than the cutoff (over 3 batches of 7), 12 at or after it
            old = [{"a": "agent-old", "b": "boot", "s": i, "r": RAW_CUTOFF - 1 - i * 60 * NS} for i in range(22)]
            old.append({"a": "agent-both", "b": "boot-1", "s": 1, "r": RAW_CUTOFF - 1})
            new = [{"a": "agent-new", "b": "boot", "s": i, "r": RAW_CUTOFF + i * 3600 * NS} for i in range(11)]
            new.append({"a": "agent-both", "b": "boot-2", "s": 1, "r": RAW_CUTOFF})  # at the cutoff: kept
            # Claims of before revision 0010 have no device; on Citus every claim has one (storage.citus).
            device = 1 if is_citus(conn) else None
            conn.execute(text("INSERT INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows, device_id)"
                              " VALUES (:a, :b, :s, :r, 10, :d)"), [{**r, "d": device} for r in old + new])
        expected = sorted((r["a"], r["b"], r["s"], r["r"]) for r in new)

        off = RetentionJob(engine, RetentionSettings(raw_s=None, batch_rows=7), owner="t", clock=lambda: NOW).run_once()
        assert off.ran and "ingested_batches" not in off.deleted and len(_claims(engine)) == 35, "raw tier off: kept"

        job = RetentionJob(engine, RetentionSettings(batch_rows=7), owner="t", clock=lambda: NOW)
        report = job.run_once()
        assert report.ran and report.deleted["ingested_batches"] == 23
        assert _claims(engine) == expected
        again = job.run_once()
        assert again.deleted["ingested_batches"] == 0 and _claims(engine) == expected
    finally:
        engine.dispose()


def test_a_recent_batch_resent_after_a_pass_is_still_a_duplicate(db_url: str) -> None:
    """Through the real writer: the claim of a batch received a day ago survives the pass, so its
    resend stores nothing; one received 8 days ago lost its claim, and its resend lands below the
    raw cutoff, where the next pass deletes it."""
    engine = make_engine(db_url)
    try:
        device_id = register_device(engine, pb.RegisterRequest(agent_id="id-part", boot_id="boot", name="part", sent_ns=NOW),
                                    received_ns=NOW).device_id
        ensure_partitions_ahead(engine, NOW - 10 * DAY, days_ahead=11)
        old_start, recent_start = NOW - 8 * DAY, NOW - DAY
        writer = BatchWriter(engine)
        writer.start()
        try:
            assert not writer.submit(_batch_item(device_id, 1, old_start, 50)).result(60).duplicate
            assert not writer.submit(_batch_item(device_id, 2, recent_start, 50)).result(60).duplicate
            recent = _samples(engine, lo=RAW_CUTOFF)
            recent_host = _samples(engine, "host", lo=RAW_CUTOFF)
            assert recent == 50 and recent_host == 50

            job = RetentionJob(engine, RetentionSettings(batch_rows=7), clock=lambda: NOW)
            report = job.run_once()
            assert report.deleted["ingested_batches"] == 1
            assert [r[:3] for r in _claims(engine)] == [("id-part", "boot", 2)]

            again = writer.submit(_batch_item(device_id, 2, recent_start, 50)).result(60)
            assert again.duplicate, "the recent batch's claim survived the pass"
            assert _samples(engine, lo=RAW_CUTOFF) == recent
            assert _samples(engine, "host", lo=RAW_CUTOFF) == recent_host

            resent_old = writer.submit(_batch_item(device_id, 1, old_start, 50)).result(60)
            assert not resent_old.duplicate, "its claim went with the raw tier"
            assert _samples(engine, hi=RAW_CUTOFF) == 50
        finally:
            writer.stop()
        job.run_once()
        assert _samples(engine, hi=RAW_CUTOFF) == 0
        assert _samples(engine, "host", hi=RAW_CUTOFF) == 0
        assert _samples(engine, lo=RAW_CUTOFF) == recent
    finally:
        engine.dispose()
