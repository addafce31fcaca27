"""Schema migrations on SQLite and PostgreSQL: the baseline is the schema databases made before
migrations hold (frozen in ``fixtures/``), head is what ``schema.py`` declares, such a database
is adopted and upgraded with every row kept, a collector starting on it upgrades it and keeps
ingesting exactly once, and what must be refused is refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, inspect, text

from fleetscope.agent.daemon.batcher import fill_gpu
from fleetscope.agent.daemon.uplink import with_sent_ns
from fleetscope.agent.records import GpuSample
from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.citus import DROPPED_FOREIGN_KEYS, distribute, is_citus
from fleetscope.collector.storage.engine import ensure_schema, make_engine, schema_problem_for_readers
from fleetscope.collector.storage.schema import metadata
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import CollectorProcess, free_port, wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
CLI = [sys.executable, "-m", "fleetscope.cli"]
MD = (("authorization", "Bearer test-token"),)
HEAD = migrations.head()
# Each step of an upgrade from an empty database: (from, to).
STEPS_FROM_EMPTY = list(zip((None, *migrations.revisions()[:-1]), migrations.revisions()))
# Every table of the baseline: what a database made before migrations holds.
BASELINE_TABLES = {
    "devices", "incidents", "ingested_batches", "streams", "host_samples", "gpu_samples", "gpu_state",
    "latency_histograms", "metric_points", "inventory_records", "log_events", "schema_info",
    "gpu_rollups", "host_rollups", "latency_rollups", "rollup_progress", "rollup_leases",
}
ROLLUP_TABLES_OF_THE_BASELINE = ("gpu_rollups", "host_rollups", "latency_rollups", "rollup_progress", "rollup_leases")


# ---------------------------------------------------------------- helpers (also used by test_db_cli)


def build_database_made_before_migrations(url: str, *, without: tuple[str, ...] = ()) -> None:
    """A database as collectors from before migrations left it: the statements they ran, frozen
    in ``fixtures/``. ``without``: tables to leave out (a database older than the rollup tables)."""
    engine = make_engine(url, create=False)
    sql = (FIXTURES / f"schema_before_migrations.{engine.dialect.name}.sql").read_text()
    statements = [s.strip() for s in re.sub(r"(?m)^--.*$", "", sql).split(";") if s.strip()]
    skipped = [s for s in statements if any(re.search(rf"\bON {t} \(|^CREATE TABLE {t} \(", s) for t in without)]
    assert len(skipped) >= len(without)
    with engine.begin() as conn:
        for statement in statements:
            if statement not in skipped:
                conn.exec_driver_sql(statement)
    engine.dispose()


def state_of(url: str) -> migrations.SchemaState:
    engine = make_engine(url, create=False)
    try:
        return migrations.read_state_of(engine)
    finally:
        engine.dispose()


def reflect(engine: Engine) -> dict[str, Any]:
    """Everything about the tables that a schema comparison needs, in a comparable form."""
    tables = inspect(engine)
    out: dict[str, Any] = {}
    for t in sorted(tables.get_table_names()):
        if t == "alembic_version":
            continue
        out[t] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"], c.get("default")) for c in tables.get_columns(t)],
            "pk": (tables.get_pk_constraint(t)["name"], tables.get_pk_constraint(t)["constrained_columns"]),
            "fks": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                for f in tables.get_foreign_keys(t)
            ),
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in tables.get_indexes(t)),
            "uniques": sorted((u["name"], tuple(u["column_names"])) for u in tables.get_unique_constraints(t)),
        }
    return out


def drop_everything(engine: Engine) -> None:
    """Every table, one by one (not the schema: on Citus the extension keeps objects there)."""
    with engine.begin() as conn:
        for t in inspect(conn).get_table_names():
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{t}"' + (" CASCADE" if engine.dialect.name == "postgresql" else ""))


def create_all(engine: Engine) -> None:
    """``metadata.create_all``, spread as ``db upgrade`` spreads it on a Citus coordinator."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        distribute(conn)


def differences_from_metadata(engine: Engine) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from fleetscope.collector.storage.partitions import is_partition_name

    def not_a_partition(name, type_, _parent):  # type: ignore[no-untyped-def]
        # PostgreSQL's day and default partitions (revision 0007) are tables of their own, made by
        # the partitioning, not by the metadata.
        return not (type_ == "table" and is_partition_name(name))

    opts = {"compare_type": True, "include_name": not_a_partition}
    with engine.connect() as conn:
        found = list(compare_metadata(MigrationContext.configure(conn, opts=opts), metadata))
        citus = is_citus(conn)
    if citus:  # what a Citus coordinator changes on purpose (storage.citus): the foreign keys to
        # devices, and every claim has its device (the distribution column)
        dropped = {t for t, _constraint in DROPPED_FOREIGN_KEYS}  # each table's one key to devices
        found = [d for d in found if not (d[0] == "add_fk" and d[1].parent.name in dropped
                                          and d[1].referred_table.name == "devices")]
        found = [d for d in found if not (isinstance(d, list) and len(d) == 1
                                          and d[0][:4] == ("modify_nullable", None, "ingested_batches", "device_id"))]
    return found


def columns_of(engine: Engine, tables: set[str]) -> dict[str, list[str]]:
    inspector = inspect(engine)
    return {t: [c["name"] for c in inspector.get_columns(t)] for t in tables}


def dump(engine: Engine, tables: set[str], columns: dict[str, list[str]] | None = None) -> dict[str, list]:
    """Every row of every table (of ``columns`` where given: the columns a table had before a
    revision added some), sorted, JSON values as text: equal dumps are equal contents."""
    out = {}
    with engine.connect() as conn:
        for t in sorted(tables):
            selected = ", ".join(columns[t]) if columns and t in columns else "*"
            rows = conn.execute(text(f"SELECT {selected} FROM {t}")).all()
            out[t] = sorted((tuple(json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v for v in r)
                             for r in rows), key=repr)
    return out


# ---------------------------------------------------------------- the revisions themselves


def test_upgrade_of_an_empty_database_gives_the_schema_create_all_gives(db_url: str) -> None:
    engine = make_engine(db_url, create=False)
    try:
        report = migrations.upgrade(engine)
        assert [(s.from_revision, s.to_revision) for s in report.steps] == STEPS_FROM_EMPTY
        assert differences_from_metadata(engine) == []
        migrated = reflect(engine)
        drop_everything(engine)
        create_all(engine)
        assert reflect(engine) == migrated, "alembic upgrade head and create_all make the same tables"
    finally:
        engine.dispose()
    assert migrations.revisions()[:2] == ("0001", "0002") and migrations.revisions()[-1] == HEAD


def test_the_baseline_is_exactly_the_schema_of_databases_made_before_migrations(db_url: str) -> None:
    build_database_made_before_migrations(db_url)
    engine = make_engine(db_url, create=False)
    try:
        before_migrations = reflect(engine)
        assert set(before_migrations) == BASELINE_TABLES
        drop_everything(engine)
        migrations.upgrade(engine, "0001")
        assert reflect(engine) == before_migrations
        with engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM schema_info")).scalar() == "1"
    finally:
        engine.dispose()


def test_a_database_made_before_migrations_is_adopted_as_the_baseline_and_upgraded(db_url: str) -> None:
    build_database_made_before_migrations(db_url)
    engine = make_engine(db_url, create=False)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO rollup_leases VALUES ('rollup', 'old-collector:41:ab12', 1800000000000000000)"))
        state = migrations.read_state_of(engine)
        assert state.made_before_migrations and state.known and state.effective_revision == "0001"
        report = migrations.upgrade(engine)
        assert report.lines()[0].startswith("made before migrations -> 0001: baseline")
        assert report.lines()[1].startswith("0001 -> 0002: leases")
        assert report.after == HEAD and migrations.read_state_of(engine).at_head
        assert differences_from_metadata(engine) == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name, owner, expires_ns FROM leases")).all() == [
                ("rollup", "old-collector:41:ab12", 1800000000000000000)
            ]
            assert conn.execute(text("SELECT value FROM schema_info")).scalar() == "2", "collectors from before refuse it"
        assert not inspect(engine).has_table("rollup_leases")
    finally:
        engine.dispose()


def test_a_database_older_than_the_rollup_tables_gets_them_when_adopted(db_url: str) -> None:
    """Collectors before the rollups existed wrote schema_info version 1 too, and collectors after
    them created the rollup tables only when their rollup job first ran."""
    build_database_made_before_migrations(db_url, without=ROLLUP_TABLES_OF_THE_BASELINE)
    engine = make_engine(db_url, create=False)
    try:
        assert not inspect(engine).has_table("gpu_rollups")
        migrations.upgrade(engine)
        assert differences_from_metadata(engine) == []
    finally:
        engine.dispose()


def test_downgrade_to_the_baseline_gives_back_what_collectors_before_migrations_read(db_url: str) -> None:
    build_database_made_before_migrations(db_url)
    engine = make_engine(db_url, create=False)
    try:
        baseline = reflect(engine)
        migrations.upgrade(engine)
        with engine.begin() as conn:  # the rollup lease, and a detector's lease the baseline has no place for
            conn.execute(text("INSERT INTO leases VALUES ('rollup', 'a', 5), ('detector:xid', 'b', 6)"))
        report = migrations.downgrade(engine, "0001")
        assert report.lines()[-1] == f"0002 -> 0001: undone: {migrations.describe('0002')}"
        assert reflect(engine) == baseline
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name, owner, expires_ns FROM rollup_leases")).all() == [("rollup", "a", 5)]
            assert conn.execute(text("SELECT value FROM schema_info")).scalar() == "1"
        assert migrations.upgrade(engine).after == HEAD
    finally:
        engine.dispose()


def test_a_step_that_fails_halfway_leaves_the_database_as_it_was(db_url: str) -> None:
    """0002 creates ``leases``, copies the rows, drops ``rollup_leases``, then sets schema_info's
    version: a trigger refuses that last statement. On SQLite too (where Python's sqlite3 would
    have committed each DDL statement by itself) nothing of the first three may remain."""
    engine = make_engine(db_url, create=False)
    try:
        migrations.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO rollup_leases VALUES ('rollup', 'old', 7)"))
            if engine.dialect.name == "postgresql":
                conn.exec_driver_sql(
                    "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                    " LANGUAGE plpgsql"
                )
                conn.exec_driver_sql(
                    "CREATE TRIGGER refuse BEFORE UPDATE ON schema_info FOR EACH ROW EXECUTE FUNCTION refuse()"
                )
            else:
                conn.exec_driver_sql(
                    "CREATE TRIGGER refuse BEFORE UPDATE ON schema_info BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
        before = reflect(engine)
        with pytest.raises(StoreUnavailable, match="migration failed, nothing was changed in database .*refused by the test"):
            migrations.upgrade(engine)
        assert migrations.read_state_of(engine).revision == "0001"
        assert reflect(engine) == before and not inspect(engine).has_table("leases")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT owner FROM rollup_leases")).all() == [("old",)]
    finally:
        engine.dispose()


@pytest.mark.builds_project
@pytest.mark.processes
def test_the_revision_files_ship_in_the_wheel_and_alembic_reads_them_there(tmp_path: Path) -> None:
    if not (REPO / "pyproject.toml").exists():
        pytest.skip("not run from a source tree")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)], check=True,
                   timeout=300)
    (wheel,) = tmp_path.glob("fleetscope-*.whl")
    prefix = "fleetscope/collector/storage/migrations/"
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(prefix)]
        assert {prefix + "env.py", prefix + "versions/0001_baseline.py", prefix + "versions/0002_leases.py"} <= set(names)
        z.extractall(tmp_path / "unpacked", members=names)
    from alembic.script import ScriptDirectory

    shipped = ScriptDirectory(str(tmp_path / "unpacked" / prefix))
    assert [r.revision for r in shipped.walk_revisions()] == list(reversed(migrations.revisions()))


# ---------------------------------------------------------------- who upgrades, who refuses


@pytest.mark.processes
def test_a_database_newer_than_this_code_is_refused_with_one_line(db_url: str) -> None:
    make_engine(db_url).dispose()
    engine = make_engine(db_url, create=False)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    try:
        for attempt in (lambda: ensure_schema(engine), lambda: migrations.upgrade(engine), lambda: make_engine(db_url)):
            with pytest.raises(migrations.SchemaUnknown) as refused:
                attempt()
            message = str(refused.value)
            assert "\n" not in message and "0099" in message and "upgrade fleetscope" in message
        problem = schema_problem_for_readers(engine)
        assert problem is not None and "0099" in problem and "upgrade fleetscope" in problem
        run = subprocess.run([*CLI, "collector", "--listen", f"127.0.0.1:{free_port()}", "--db", db_url, "--token", "t"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 1
        assert run.stderr.strip().splitlines() == [f"fleetscope collector: {message}"]
        # Readers refuse too, in one line, instead of misreading tables they do not know.
        run = subprocess.run([*CLI, "devices", "--db", db_url], capture_output=True, text=True, timeout=60)
        assert run.returncode == 1
        assert run.stderr.strip().splitlines() == [problem]
        assert migrations.read_state_of(engine).revision == "0099", "refused means untouched"
    finally:
        engine.dispose()


@pytest.mark.processes
@pytest.mark.parametrize("start_from", ["0001", "made before migrations", "empty"])
def test_collector_with_no_db_upgrade_refuses_a_database_behind_and_names_the_command(
    db_url: str, start_from: str
) -> None:
    if start_from == "made before migrations":
        build_database_made_before_migrations(db_url)
    elif start_from == "0001":
        engine = make_engine(db_url, create=False)
        migrations.upgrade(engine, "0001")
        engine.dispose()
    before = state_of(db_url)
    run = subprocess.run(
        [*CLI, "collector", "--no-db-upgrade", "--listen", f"127.0.0.1:{free_port()}", "--db", db_url, "--token", "t"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    url = migrations.url_of(make_engine(db_url, create=False))
    assert line.startswith(f"fleetscope collector: database {url}: ")
    assert line.endswith(f"run 'fleetscope db upgrade --db {url}' first")
    assert state_of(db_url) == before, "the database is left as it was"


@pytest.mark.server
def test_collector_with_no_db_upgrade_starts_on_a_database_at_head(db_url: str) -> None:
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    make_engine(db_url).dispose()
    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, upgrade_db=False, rollups=False))
    c.start()
    c.stop()


@pytest.mark.processes
def test_readers_refuse_an_older_database_without_changing_it(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetscope.collector.storage import engine as engine_module

    build_database_made_before_migrations(db_url)
    engine = make_engine(db_url, create=False)
    try:
        url = migrations.url_of(engine)
        # 0003 changed what readers read (the incident lifecycle, the devices' clock steps): they
        # say what to run instead of failing on a missing column.
        assert engine_module.READABLE_SINCE == "0003"
        assert schema_problem_for_readers(engine) == (
            f"database {url}: schema made before migrations (the baseline, 0001), behind head {HEAD}; "
            f"run 'fleetscope db upgrade --db {url}' to read it"
        )
        with monkeypatch.context() as m:  # a reader that understood the baseline would read it
            m.setattr(engine_module, "READABLE_SINCE", migrations.BASELINE)
            assert schema_problem_for_readers(engine) is None
        run = subprocess.run([*CLI, "devices", "--db", db_url, "--json"], capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and "Traceback" not in run.stderr
        assert f"run 'fleetscope db upgrade --db {url}' to read it" in run.stderr
        assert migrations.read_state_of(engine).made_before_migrations, "a reader never migrates"
        assert not inspect(engine).has_table("alembic_version")
    finally:
        engine.dispose()


@pytest.mark.processes
def test_collectors_starting_together_on_an_empty_database_migrate_it_once(
    tmp_path: Path, db_url: str
) -> None:
    collectors = [CollectorProcess(db_url, free_port(), "test-token", tmp_path / f"c{i}.log") for i in range(3)]
    errors: list[BaseException] = []

    def start(c: CollectorProcess) -> None:
        try:
            c.start()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(c,)) for c in collectors]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not errors, errors
        assert state_of(db_url).at_head
        logs = [c.log_path.read_text() for c in collectors]
        assert sum("schema created: empty -> 0001" in log for log in logs) == 1, "one of them created it"
        assert sum("schema created: 0001 -> 0002" in log for log in logs) == 1
        assert not any("Traceback" in log for log in logs)
    finally:
        for c in collectors:
            c.stop()


def test_concurrent_db_upgrades_on_postgresql_both_end_at_head(pg_url: str) -> None:
    build_database_made_before_migrations(pg_url)
    procs = [subprocess.Popen([*CLI, "db", "upgrade", "--db", pg_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted("upgrading from" in out for out, _ in outs) == [False, True], "one upgrades, the other finds it done"
    assert all(err == "" for _, err in outs)
    assert state_of(pg_url).at_head


# ---------------------------------------------------------------- the acceptance test


def _register(channel: grpc.Channel, agent_id: str) -> None:
    register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
    # A registration on Citus, on a busy 2-core CI box, took more than 10 s; and a collector just
    # started there once took over 20 s (gRPC's connect timeout) to answer the connection:
    # the replayer, like an agent, goes on trying until its deadline.
    register(pb.RegisterRequest(agent_id=agent_id, boot_id="b", name="replayer", sent_ns=time.time_ns()), metadata=MD,
             timeout=60, wait_for_ready=True)


def _send(port: int, agent_id: str, batches: list[pb.Batch]) -> list[int]:
    """Register and stream ``batches`` as an agent would; the acknowledgements' statuses by seq order."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        _register(channel, agent_id)
        stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b,
                                       response_deserializer=pb.Ack.FromString)
        acks = list(stream(iter([with_sent_ns(b.SerializeToString(), time.time_ns()) for b in batches]), metadata=MD,
                           timeout=30, wait_for_ready=True))
    return [a.status for a in sorted(acks, key=lambda a: a.seq)]


def _batch(agent_id: str, seq: int) -> pb.Batch:
    b = pb.Batch(agent_id=agent_id, boot_id="b", seq=seq, created_ns=time.time_ns())
    fill_gpu(b.gpu, [GpuSample(ts_ns=b.created_ns + i, gpu_index=0, temp_c=40.0 + seq, energy_j=float(1000 * seq + i))
                     for i in range(5)])
    return b


class ContinuingSampler(CountingSampler):
    """A CountingSampler whose sequence numbers go on from ``start``: a second agent process."""

    def __init__(self, start: int, total: int, **kw: Any) -> None:
        super().__init__(total, **kw)
        self.produced = start


def test_a_database_filled_before_migrations_keeps_every_row_and_ingests_exactly_once_after(
    tmp_path: Path, db_url: str, collector_process, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetscope.collector.ingest import server
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    build_database_made_before_migrations(db_url)
    port = free_port()

    # 1. Fill it through the real ingest path (agent -> gRPC -> collector -> writer) as a
    #    collector of that time did: one in this process whose start-up upgrade is skipped (and
    #    no rollup job or detectors, whose tables that schema does not have yet).
    monkeypatch.setattr(server, "ensure_schema", lambda engine, upgrade: None)
    # ...and whose incident writer knew only the baseline's columns (and grouped nothing).
    from fleetscope.collector.storage import incidents as incident_writer
    from fleetscope.collector.storage import writer as batch_writer

    def baseline_write_incidents(cur, incidents, sqlite, **_):  # type: ignore[no-untyped-def]
        cols = incident_writer._COLUMNS
        p, json_p = ("?", "?") if sqlite else ("%s", "CAST(%s AS JSON)")
        marks = ", ".join(json_p if c in ("facts", "context") else p for c in cols)
        cur.executemany(f"INSERT INTO incidents ({', '.join(cols)}) VALUES ({marks})",
                        [tuple(json.dumps(r[c]) if c in ("facts", "context") else r[c] for c in cols) for r in incidents])

    monkeypatch.setattr(batch_writer, "write_incidents", baseline_write_incidents)

    def baseline_claim_batches(cur, claims, sqlite):  # type: ignore[no-untyped-def]  # claims had no device (0010)
        claimed = []
        for c in claims:
            values = (c.agent_id, c.boot_id, c.seq, c.received_ns, c.sample_rows)
            if sqlite:
                cur.execute("INSERT OR IGNORE INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows)"
                            " VALUES (?,?,?,?,?)", values)
            else:
                cur.execute("INSERT INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows)"
                            " VALUES (%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING", values)
            claimed.append(cur.rowcount == 1)
        return claimed

    monkeypatch.setattr(batch_writer.statements, "claim_batches", baseline_claim_batches)
    # ...and that stored a row per sample in the tail tables (chunks at ingest came with 0011).
    from fleetscope.collector.storage import rows as batch_rows_module
    from fleetscope.collector.storage.batch_chunks import SampleChunks

    monkeypatch.setattr(batch_writer, "batch_rows",
                        lambda *a, samples=True, **k: batch_rows_module.batch_rows(*a, samples=True, **k))
    monkeypatch.setattr(batch_writer, "sample_chunks",
                        lambda batch, decoded, **k: SampleChunks(sample_rows=decoded.sample_rows))
    # ...and that knew nothing of enrolled identities (revision 0004's tables).
    from fleetscope.collector.ingest.identity import Authenticator

    monkeypatch.setattr(Authenticator, "registration_check", lambda self, presented, req: lambda session: None)
    monkeypatch.setattr(Authenticator, "stream_agent", lambda self, presented: None)
    monkeypatch.setattr(Authenticator, "keyless_may_write", lambda self, agent_id: True)
    old = Collector(CollectorSettings(listen=f"127.0.0.1:{port}", db_url=db_url, tokens=frozenset(["test-token"]),
                                      rollups=False, detectors=None, grace_s=2.0))
    old.start()
    sampler = CountingSampler(total=3_000, per_tick=50, incidents_every=5)
    agent = make_agent(tmp_path, [f"127.0.0.1:{port}"], sampler)
    replayer = str(uuid.uuid4())
    try:
        agent.start()
        wait_until(sampler.done, message="sampling done")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 3_000, message="all samples stored")
        assert _send(port, replayer, [_batch(replayer, s) for s in (1, 2, 3)]) == [pb.Ack.STATUS_STORED] * 3
    finally:
        agent.stop()
        old.stop()
    monkeypatch.undo()
    engine = make_engine(db_url, create=False)
    with engine.begin() as conn:  # the lease a rollup job of that time held (it had not expired yet)
        conn.execute(text("INSERT INTO rollup_leases VALUES ('rollup', 'old-host:4242:deadbeef', :t)"),
                     {"t": time.time_ns() + 3600 * 10**9})
    assert migrations.read_state_of(engine).made_before_migrations
    kept = BASELINE_TABLES - {"rollup_leases", "schema_info"}
    baseline_columns = columns_of(engine, kept)
    before = dump(engine, kept)
    lease_before = dump(engine, {"rollup_leases"})["rollup_leases"]
    incidents = len(before["incidents"])
    assert incidents >= 12 and len(before["gpu_samples"]) == 3_000 + 15

    # 2. A real collector starts on it: it upgrades the database, then serves.
    collector = collector_process(db_url, port=port).start()
    try:
        assert migrations.read_state_of(engine).at_head
        assert "schema upgraded: made before migrations -> 0001" in collector.log_path.read_text()
        assert dump(engine, kept, baseline_columns) == before, "every row of every table is still there, unchanged"
        with engine.connect() as conn:
            lifecycle = conn.execute(text("SELECT state, origin, count, last_seen_ns = ts_ns, updated_ns = received_ns"
                                          " FROM incidents")).all()
        assert set(lifecycle) == {("open", "agent", 1, True, True)}, "0003 filled the lifecycle of the old incidents"
        with engine.connect() as conn:
            facts = [json.loads(r[0]) if isinstance(r[0], str) else r[0]
                     for r in conn.execute(text("SELECT facts FROM incidents ORDER BY id"))]
        assert facts == [{"n": n} for n in range(1, incidents + 1)]
        rollup_lease = [row for row in dump(engine, {"leases"})["leases"] if row[0] == "rollup"]
        assert rollup_lease == lease_before, "the rollup lease moved, holder and expiry kept"
        assert not inspect(engine).has_table("rollup_leases")
        assert differences_from_metadata(engine) == []

        # 3. It goes on ingesting exactly once: a batch resent from before the upgrade is a
        #    duplicate, a new one is stored, and the agent's next samples arrive once each.
        assert _send(port, replayer, [_batch(replayer, 2), _batch(replayer, 4)]) == [
            pb.Ack.STATUS_DUPLICATE, pb.Ack.STATUS_STORED,
        ]
        agent = make_agent(tmp_path, [collector.address], ContinuingSampler(3_000, 5_000, per_tick=50))
        agent.start()
        try:
            wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 5_000, message="the second agent's samples")
        finally:
            agent.stop()
        assert sorted(gpu_sequence_numbers(db_url)) == list(range(5_000)), "every sample exactly once"
        assert sorted(gpu_sequence_numbers(db_url, "replayer")) == sorted(
            1000 * s + i for s in (1, 2, 3, 4) for i in range(5)
        )
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM rollup_progress")).scalar() == 0, (
                "the old holder's lease is honoured: nobody rolled while it was valid"
            )
    finally:
        collector.stop()
        engine.dispose()
