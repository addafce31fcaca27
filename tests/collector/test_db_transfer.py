"""``fleetscope db export``, ``db import`` and ``db copy`` through the real command line: a SQLite
fleet filled by simulated devices through real agents, gRPC and a real collector moves to a real
PostgreSQL with every row, and the read API answers the same questions the same way on both; a
damaged or cut export changes nothing; a target that holds a fleet is refused."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from fleetscope.agent.classify import classify_event
from fleetscope.agent.records import LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.tools.simulate import XID_LINE, build_fleet
from fleetscope.cli import main
from fleetscope.collector import query
from fleetscope.collector.commands.db_transfer import FORMAT, tables_in_order
from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.citus import DISTRIBUTED, citus_state
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import metadata
from tests.conftest import wait_until
from tests.helpers import sample_count, table_count

TOKEN = "test-token"


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """A SQLite fleet: servers and drones with samples, GPU state, logs, incidents, latency and
    Jetson metric points, written by the real ingest path; and the time it was filled until."""
    tmp = tmp_path_factory.mktemp("fleet")
    url = f"sqlite:///{tmp / 'fleet.db'}"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]), grace_s=2.0))
    port = collector.start()
    fleet = build_fleet(collectors=[f"127.0.0.1:{port}"], token=TOKEN, devices=4, state_dir=tmp / "agents", interval_s=0.2,
                        gpus_per_server=2, incident_every_s=1.0, first_incident_s=0.3, classify=classify_event)
    fleet.start()
    try:
        # The first server's OOM comes at once (first_incident_s); a drone's kernel Xid line makes
        # the second without waiting for the simulator's own next one (45 s or more).
        drone = fleet.agents[0]
        line = LogEvent(time.time_ns(), "kmsg", XID_LINE, "critical")
        drone.add(SampleSet(logs=[line], incidents=classify_event(line)))
        wait_until(lambda: table_count(url, "incidents") >= 2 and table_count(url, "latency_histograms") >= 2
                   and table_count(url, "log_events") >= 4 and sample_count(url, "gpu") >= 200,
                   timeout_s=60, message="a fleet with incidents, logs and latency")
    finally:
        fleet.stop()
        collector.stop()
    if "gpu_chunks" in metadata.tables:  # a binary column: every byte value, NUL included, must travel unchanged
        engine = make_engine(url, create=False)
        with engine.begin() as conn:
            conn.execute(metadata.tables["gpu_chunks"].insert(), [
                {"device_id": 999, "gpu_index": 0, "start_ns": 1, "end_ns": 2, "rows": 2, "codec": 1,
                 "data": bytes(range(256)) * 3},
                {"device_id": 999, "gpu_index": 1, "start_ns": 1, "end_ns": 2, "rows": 2, "codec": 1, "data": b""},
            ])
        engine.dispose()
    return url, time.time_ns()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def dump(url: str) -> dict[str, list[str]]:
    """Every row of every table, typed as the code reads them (JSON parsed, booleans as bool),
    as sorted reprs: a multiset per table that NaN compares in."""
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as conn:
            present = set(conn.dialect.get_table_names(conn))
            return {t.name: sorted(repr(tuple(r)) for r in conn.execute(select(t)))
                    for t in tables_in_order() if t.name in present}
    finally:
        engine.dispose()


def answers(url: str, until_ns: int) -> list[Any]:
    """What the read API says about the fleet: the questions the CLI and the dashboard ask."""
    since = until_ns - 3600 * 10**9
    engine = query.open_database(url)
    try:
        with query.session_scope(engine) as s:
            devices = query.list_devices(session=s, now_ns=until_ns)
            names = [d.name for d in devices]
            out: list[Any] = [devices, query.count_samples(session=s)]
            for name in names:
                out.append(query.device_metrics(session=s, device=name, since_ns=since, until_ns=until_ns))
                # Lines with the same timestamp (read in one poll, or from two sources in one tick)
                # come in each database's storage order: compared as one set per timestamp.
                logs = query.search_logs(session=s, device=name, since_ns=since, until_ns=until_ns)
                out.append(sorted(logs, key=lambda line: (line.ts_ns, line.source, line.message)))
                # Chart averages are summed in SQL, in an order each database picks: equal to the last bits.
                out.append(_rounded(query.device_series(session=s, device=name, since_ns=since, until_ns=until_ns)))
            out.append(query.search_incidents(session=s, since_ns=since, until_ns=until_ns))
            out.append(query.latency_stats(session=s, devices=names, since_ns=since, until_ns=until_ns))
            return [repr(a) for a in out]
    finally:
        engine.dispose()


def _rounded(value: Any) -> Any:
    """``value`` (dataclasses, containers, floats) with every float to 12 significant digits."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _rounded(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.12g}")
    return value


def _state(url: str) -> migrations.SchemaState:
    engine = make_engine(url, create=False)
    try:
        return migrations.read_state_of(engine)
    finally:
        engine.dispose()


def test_a_sqlite_fleet_moves_to_postgresql_and_every_question_gets_the_same_answer(
    capsys: pytest.CaptureFixture[str], fleet_db: tuple[str, int], pg_url: str, tmp_path: Path
) -> None:
    source, until_ns = fleet_db
    out_file = tmp_path / "fleet.export"
    code, out, err = _run(capsys, "db", "export", "--db", source, "--out", str(out_file))
    assert code == 0, err
    assert out[0].startswith(f"{out_file}: ") and " rows in " in out[0]
    assert any(line.startswith("  gpu_samples: ") for line in err), "progress: rows per table on stderr"
    assert not (tmp_path / "fleet.export.partial").exists()

    code, out, err = _run(capsys, "db", "import", "--db", pg_url, "--from", str(out_file))
    assert code == 0, err
    assert "rows in" in out[0] and f"(schema revision {migrations.head()})" in out[0]
    assert any(line.startswith("  devices: ") for line in err)
    assert _state(pg_url).at_head

    before = dump(source)
    after = dump(pg_url)
    assert set(after) >= set(before)
    for name, rows in before.items():
        assert after[name] == rows, f"table {name} differs"
    assert len(before["gpu_chunks"]) > 2 and len(before["incidents"]) >= 2  # the fleet's chunks besides the two made here
    stored = sample_count(source, "gpu")
    assert stored >= 200 and sample_count(pg_url, "gpu") == stored, "every sample readable from the chunks moved"
    assert answers(pg_url, until_ns) == answers(source, until_ns)

    # Ids were kept, so the sequences must be past them: the next device and incident get new ids.
    engine = make_engine(pg_url, create=False)
    try:
        with engine.begin() as conn:
            for table in ("devices", "incidents"):
                biggest = conn.execute(text(f"SELECT max(id) FROM {table}")).scalar_one()
                nxt = conn.execute(text(f"SELECT nextval(pg_get_serial_sequence('{table}', 'id'))")).scalar_one()
                assert nxt > biggest
    finally:
        engine.dispose()

    # A second import into the now full database is refused, in one line, and changes nothing.
    code, out, err = _run(capsys, "db", "import", "--db", pg_url, "--from", str(out_file))
    assert code == 1 and out == [] and len(err) == 1
    assert "already holds data (4 devices; rows in " in err[0] and "--replace" in err[0] and "was not changed" in err[0]
    assert dump(pg_url) == after

    # --replace empties it in the same transaction and loads the export again: the same rows.
    code, out, err = _run(capsys, "db", "import", "--db", pg_url, "--from", str(out_file), "--replace")
    assert code == 0, err
    assert dump(pg_url) == after

    # And back: PostgreSQL copied straight into a new SQLite file holds what the source held.
    back = f"sqlite:///{tmp_path / 'back.db'}"
    code, out, err = _run(capsys, "db", "copy", "--from", pg_url, "--to", back)
    assert code == 0, err
    assert dump(back) == before
    assert answers(back, until_ns) == answers(source, until_ns)


def _cut(src: Path, dst: Path, keep: float) -> None:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])


def _flip(src: Path, dst: Path) -> None:
    data = bytearray(src.read_bytes())
    mid = len(data) // 2
    data[mid] ^= 0xFF
    data[mid + 1] ^= 0x55
    dst.write_bytes(bytes(data))


def _rewrite(src: Path, dst: Path, edit) -> None:  # type: ignore[no-untyped-def]
    with gzip.open(src, "rb") as f:
        records = [json.loads(line) for line in f]
    records = edit(records)
    with gzip.open(dst, "wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")


def _drop_rows(records: list[dict]) -> list[dict]:
    """A file whose gzip is whole but which lost one record of gpu_chunks rows (a bad copy, an edit)."""
    i = next(i for i, r in enumerate(records) if r.get("table") == "gpu_chunks" and "rows" in r)
    return records[:i] + records[i + 1:]


def test_a_sqlite_fleet_moves_to_citus_and_every_question_gets_the_same_answer(
    capsys: pytest.CaptureFixture[str], fleet_db: tuple[str, int], citus_url: str, tmp_path: Path
) -> None:
    """The same export imported into a Citus coordinator (issue 30): the import upgrades and
    spreads the schema, every row lands, and the query API answers as it does on the source."""
    source, until_ns = fleet_db
    out_file = tmp_path / "fleet.export"
    code, _out, err = _run(capsys, "db", "export", "--db", source, "--out", str(out_file))
    assert code == 0, err
    code, out, err = _run(capsys, "db", "import", "--db", citus_url, "--from", str(out_file))
    assert code == 0, err
    assert _state(citus_url).at_head
    engine = make_engine(citus_url, create=False)
    try:
        with engine.connect() as conn:
            assert citus_state(conn).distributed == set(DISTRIBUTED)
    finally:
        engine.dispose()
    before, after = dump(source), dump(citus_url)
    for name, rows in before.items():
        assert after[name] == rows, f"table {name} differs"
    assert sample_count(citus_url, "gpu") == sample_count(source, "gpu")
    assert answers(citus_url, until_ns) == answers(source, until_ns)


@pytest.mark.parametrize("damage", ["cut in the middle", "cut before the end record", "bytes flipped", "a chunk missing",
                                    "unknown revision", "not an export"])
def test_a_damaged_export_is_one_line_and_leaves_the_target_as_it_was(
    capsys: pytest.CaptureFixture[str], fleet_db: tuple[str, int], pg_url: str, tmp_path: Path, damage: str
) -> None:
    good = tmp_path / "good.export"
    assert main(["db", "export", "--db", fleet_db[0], "--out", str(good)]) == 0
    bad = tmp_path / "bad.export"
    expected = {
        "cut in the middle": "is damaged or truncated",
        "cut before the end record": "is damaged or truncated",
        "bytes flipped": "is damaged",  # where depends on the flip: the compressor's check or a record's column
        "a chunk missing": "is damaged: table gpu_chunks has",
        "unknown revision": "exported at schema revision 9999, which this fleetscope does not know",
        "not an export": "is not a fleetscope export",
    }[damage]
    if damage == "cut in the middle":
        _cut(good, bad, 0.6)
    elif damage == "cut before the end record":
        _rewrite(good, bad, lambda rs: rs[:-1])
        expected = "is truncated: its end record is missing"
    elif damage == "bytes flipped":
        _flip(good, bad)
    elif damage == "a chunk missing":
        _rewrite(good, bad, _drop_rows)
    elif damage == "unknown revision":
        _rewrite(good, bad, lambda rs: [{**rs[0], "revision": "9999"}, *rs[1:]])
    else:
        bad.write_text("devices,incidents\n1,2\n")
    capsys.readouterr()
    code, out, err = _run(capsys, "db", "import", "--db", pg_url, "--from", str(bad))
    # Progress lines of the tables loaded before the damage, then the one line that says why.
    assert (code, out) == (1, []), err
    assert [line for line in err if not line.startswith("  ")] == [err[-1]], err
    assert err[-1].startswith("fleetscope db: ") and expected in err[-1] and err[-1].endswith("was not changed"), err[-1]
    assert _state(pg_url).empty, "the schema made for the import was rolled back with it"


@pytest.mark.server
def test_an_empty_target_with_a_schema_is_loaded_and_a_target_with_rows_only_after_replace(
    capsys: pytest.CaptureFixture[str], fleet_db: tuple[str, int], tmp_path: Path
) -> None:
    export = tmp_path / "f.export"
    assert main(["db", "export", "--db", fleet_db[0], "--out", str(export)]) == 0
    target = f"sqlite:///{tmp_path / 'target.db'}"
    assert main(["db", "upgrade", "--db", target]) == 0  # a collector's first start: schema, no fleet yet
    capsys.readouterr()
    code, _, err = _run(capsys, "db", "import", "--db", target, "--from", str(export))
    assert code == 0, err
    assert dump(target) == dump(fleet_db[0])
    engine = make_engine(target, create=False)
    stored = sample_count(target, "gpu")
    with engine.begin() as conn:  # the fleet goes on in the new database: a device's samples are gone
        deleted = conn.execute(text("DELETE FROM gpu_chunks WHERE device_id = (SELECT min(id) FROM devices d"
                                    " WHERE EXISTS (SELECT 1 FROM gpu_chunks c WHERE c.device_id = d.id))")).rowcount
    engine.dispose()
    assert deleted > 0 and 0 < sample_count(target, "gpu") < stored
    code, _, err = _run(capsys, "db", "import", "--db", target, "--from", str(export))
    assert code == 1 and len(err) == 1 and "already holds data" in err[0]
    assert dump(target) != dump(fleet_db[0]), "refused: nothing changed"
    code, _, err = _run(capsys, "db", "import", "--db", target, "--from", str(export), "--replace")
    assert code == 0, err
    assert dump(target) == dump(fleet_db[0])
    assert sample_count(target, "gpu") == stored


@pytest.mark.server
def test_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], fleet_db: tuple[str, int], tmp_path: Path) -> None:
    export = tmp_path / "f.export"
    assert main(["db", "export", "--db", fleet_db[0], "--out", str(export)]) == 0
    empty = tmp_path / "empty.db"
    make_engine(f"sqlite:///{empty}", create=False).connect().close()  # a file with no schema
    behind = f"sqlite:///{tmp_path / 'behind.db'}"
    engine = make_engine(behind, create=False)
    migrations.upgrade(engine, migrations.revisions()[-2])
    engine.dispose()
    cases = [
        (["db", "export", "--db", fleet_db[0], "--out", str(export)], 1, "already exists"),
        (["db", "export", "--db", behind, "--out", str(tmp_path / "b")], 1,
         f"behind head {migrations.head()}; run 'fleetscope db upgrade --db "),
        (["db", "export", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path / "x")], 2, "no database at"),
        (["db", "export", "--db", f"sqlite:///{empty}", "--out", str(tmp_path / "y")], 1, "has no fleetscope schema"),
        (["db", "export", "--db", "postgresql://u@127.0.0.1:notaport/x", "--out", str(tmp_path / "z")], 2,
         "not a database URL"),
        (["db", "import", "--db", f"sqlite:///{tmp_path / 'new.db'}", "--from", str(tmp_path / "nope.export")], 1,
         "no export file at"),
        (["db", "import", "--db", "mysql://u@h/x", "--from", str(export)], 2, "unsupported database 'mysql'"),
        (["db", "copy", "--from", fleet_db[0], "--to", fleet_db[0]], 1, "are the same database"),
    ]
    capsys.readouterr()
    for argv, want_code, want in cases:
        code, out, err = _run(capsys, *argv)
        assert (code, out, len(err)) == (want_code, [], 1), (argv, err)
        assert want in err[0], (argv, err[0])
    assert not any((tmp_path / name).exists() for name in ("x", "y", "z", "b"))
    assert not (tmp_path / "y.partial").exists(), "a failed export leaves no partial file"


@pytest.mark.parametrize("verb", ["export", "import", "copy"])
def test_help(capsys: pytest.CaptureFixture[str], verb: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["db", verb, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: fleetscope db {verb}")


@pytest.mark.server
def test_the_file_says_what_it_holds(fleet_db: tuple[str, int], tmp_path: Path) -> None:
    """The header names the format, the revision and every table with its row count, before any row."""
    export = tmp_path / "f.export"
    assert main(["db", "export", "--db", fleet_db[0], "--out", str(export)]) == 0
    with gzip.open(export, "rb") as f:
        header = json.loads(f.readline())
    assert header["format"] == FORMAT and header["revision"] == migrations.head()
    counts = {t["name"]: t["rows"] for t in header["tables"]}
    assert counts == {name: table_count(fleet_db[0], name) for name in counts}, "every table's count, empty ones too"
    # The samples sit in chunks (a row per batch, the rows inside): the two made here and the fleet's.
    assert counts["gpu_chunks"] > 2 and counts["host_chunks"] > 0 and sample_count(fleet_db[0], "gpu") >= 200
    assert [t["name"] for t in header["tables"]].index("devices") < [t["name"] for t in header["tables"]].index("incidents")
    devices = next(t for t in header["tables"] if t["name"] == "devices")
    assert "labels" in devices["json"]
