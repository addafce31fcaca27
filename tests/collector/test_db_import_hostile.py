"""``fleetscope db import`` of hostile files, through the real command line, into SQLite and
PostgreSQL: duplicate ids, JSON nested 100,000 deep, a record without rows, bad base64, rows
that are numbers, a 4 MiB gzip that unpacks to one 4 GiB line (in a subprocess held to 3 GiB of
address space), a 256 MiB device name and one of 201 characters, a JSON column nested deep, an
integer past int64, a lone surrogate: each is one line on stderr naming the record, memory stays
bounded, and the target is as it was. Hypothesis then mutates, cuts and garbles the file."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.agent.classify import classify_event
from fleetscope.agent.tools.simulate import build_fleet
from fleetscope.cli import main
from fleetscope.collector.commands.db_transfer import MAX_LINE_BYTES
from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import metadata
from tests.collector.test_db_transfer import dump
from tests.conftest import wait_until
from tests.helpers import sample_count, table_count

TOKEN = "test-token"
Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export of a small fleet written by the real ingest path (a server and a drone, samples,
    logs, latency, JSON labels and inventory), and a binary chunk."""
    tmp = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{tmp / 'fleet.db'}"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset([TOKEN]), grace_s=2.0))
    port = collector.start()
    fleet = build_fleet(collectors=[f"127.0.0.1:{port}"], token=TOKEN, devices=2, state_dir=tmp / "agents", interval_s=0.2,
                        gpus_per_server=1, incident_every_s=1.0, first_incident_s=0.3, classify=classify_event)
    fleet.start()
    try:
        wait_until(lambda: table_count(url, "log_events") >= 2 and sample_count(url, "gpu") >= 20, timeout_s=60,
                   message="a small fleet")
    finally:
        fleet.stop()
        collector.stop()
    engine = make_engine(url, create=False)
    with engine.begin() as conn:  # a binary column, every byte value
        conn.execute(metadata.tables["gpu_chunks"].insert(), [
            {"device_id": 999, "gpu_index": 0, "start_ns": 1, "end_ns": 2, "rows": 2, "codec": 1, "data": bytes(range(256))}])
    engine.dispose()
    out = tmp / "fleet.export"
    assert main(["db", "export", "--db", url, "--out", str(out)]) == 0
    return out


def read_records(path: Path) -> Records:
    with gzip.open(path, "rb") as f:
        return [json.loads(line) for line in f]


def write_records(path: Path, records: list[Any]) -> None:
    with gzip.open(path, "wb") as f:
        for r in records:
            f.write(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n")


def recount(records: Records) -> Records:
    """Header, end records and totals made to agree with the rows, so that only the edit is wrong."""
    counts: dict[str, int] = {}
    for r in records[1:]:
        if isinstance(r.get("rows"), list):
            counts[r["table"]] = counts.get(r["table"], 0) + len(r["rows"])
    for t in records[0]["tables"]:
        t["rows"] = counts.get(t["name"], 0)
    for r in records[1:]:
        if set(r) == {"table", "end"}:
            r["end"] = counts.get(r["table"], 0)
        elif set(r) == {"end"}:
            r["end"]["rows"] = sum(counts.values())
    return records


def first_rows(records: Records, table: str) -> int:
    """The index of ``table``'s first rows record (its line is this plus one)."""
    return next(i for i, r in enumerate(records) if r.get("table") == table and "rows" in r)


def import_cli(capsys: pytest.CaptureFixture[str], url: str, path: Path, *extra: str) -> tuple[int, list[str], list[str]]:
    code = main(["db", "import", "--db", url, "--from", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def assert_one_line(code: int, out: list[str], err: list[str], *wanted: str) -> str:
    """Exit 1, nothing on stdout, progress lines then one line that says why, without a traceback."""
    assert (code, out) == (1, []), err[-3:]
    said = [line for line in err if not line.startswith("  ")]
    assert len(said) == 1, err[-5:]
    line = said[0]
    assert line.startswith("fleetscope db: ") and line.endswith("was not changed"), line
    for w in wanted:
        assert w in line, line
    return line


def state_is_empty(url: str) -> bool:
    engine = make_engine(url, create=False)
    try:
        return migrations.read_state_of(engine).empty
    finally:
        engine.dispose()


def _duplicate_id(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs.insert(i + 1, {"table": "devices", "rows": [copy.deepcopy(rs[i]["rows"][0])]})
    return recount(rs), i + 2, ["(table devices) cannot be stored"]


def _nested(rs: Records) -> tuple[list[Any], int, list[str]]:
    i = first_rows(rs, "devices")
    deep = b'{"table":"devices","rows":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    return [*rs[:i], deep, *rs[i + 1:]], i + 1, ["is nested too deep"]


def _without_rows(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs[i] = {"table": "devices"}
    return rs, i + 1, ["(table devices) has no list of rows"]


def _bad_base64(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "gpu_chunks")
    data = rs[0]["tables"][[t["name"] for t in rs[0]["tables"]].index("gpu_chunks")]["columns"].index("data")
    rs[i]["rows"][0][data] = "not base64!"
    return rs, i + 1, ["(table gpu_chunks, its row 1), column data: is not base64"]


def _numbers_as_rows(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs[i]["rows"] = [1, 2]
    return recount(rs), i + 1, ["(table devices, its row 1) is a number, not a list"]


def _column(rs: Records, table: str, name: str) -> int:
    return next(t for t in rs[0]["tables"] if t["name"] == table)["columns"].index(name)


def _long_name(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs[i]["rows"][0][_column(rs, "devices", "name")] = "n" * 201
    return rs, i + 1, ["(table devices, its row 1), column name: is 201 characters, and the column holds at most 200"]


def _deep_json_column(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs[i]["rows"][0][_column(rs, "devices", "labels")] = "[" * 100_000 + "]" * 100_000
    return rs, i + 1, ["column labels: is JSON nested too deep"]


def _past_int64(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "gpu_chunks")  # where the ingested samples sit: a chunk per batch
    rs[i]["rows"][0][_column(rs, "gpu_chunks", "start_ns")] = 2**64
    return rs, i + 1, ["(table gpu_chunks, its row 1), column start_ns: 18446744073709551616 is out of range"]


def _lone_surrogate(rs: Records) -> tuple[Records, int, list[str]]:
    i = first_rows(rs, "devices")
    rs[i]["rows"][0][_column(rs, "devices", "hostname")] = "host\ud800"
    return rs, i + 1, ["column hostname: is not valid Unicode"]


HOSTILE: dict[str, Callable[[Records], tuple[list[Any], int, list[str]]]] = {
    "duplicate ids": _duplicate_id,
    "JSON nested 100,000 deep": _nested,
    "a record without rows": _without_rows,
    "bad base64": _bad_base64,
    "rows that are numbers": _numbers_as_rows,
    "a 201-character device name": _long_name,
    "a JSON column nested 100,000 deep": _deep_json_column,
    "an integer past int64": _past_int64,
    "a lone surrogate": _lone_surrogate,
}


@pytest.mark.server  # the module's export is written through a collector
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_is_one_line_naming_the_record_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], export: Path, db_url: str, tmp_path: Path, case: str
) -> None:
    records, number, wanted = HOSTILE[case](read_records(export))
    bad = tmp_path / "bad.export"
    write_records(bad, records)
    code, out, err = import_cli(capsys, db_url, bad)
    assert_one_line(code, out, err, f"record {number}", *wanted)
    assert state_is_empty(db_url), "the schema made for the import was rolled back with it"


def write_long_line(path: Path, records: Records, index: int, prefix: bytes, filler: bytes, length: int, suffix: bytes) -> None:
    """``records`` with record ``index`` replaced by ``prefix`` + ``length`` bytes of ``filler``
    + ``suffix``: gzip members one after another (one stream to a reader), the filler's member
    compressed once and repeated, so a line of gigabytes costs megabytes and milliseconds."""
    block = filler * ((64 << 20) // len(filler))
    compressed = gzip.compress(block, compresslevel=9, mtime=0)
    with path.open("wb") as f:
        f.write(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records[:index]) + prefix, mtime=0))
        for _ in range(length // len(block)):
            f.write(compressed)
        f.write(gzip.compress(suffix + b"".join(json.dumps(r).encode() + b"\n" for r in records[index + 1:]), mtime=0))


@pytest.mark.server
def test_a_256_mib_device_name_is_refused_before_it_is_read_whole(
    capsys: pytest.CaptureFixture[str], export: Path, db_url: str, tmp_path: Path
) -> None:
    records = read_records(export)
    i = first_rows(records, "devices")
    row = records[i]["rows"][0]
    name = _column(records, "devices", "name")
    before, after = json.dumps(row[:name])[:-1], json.dumps(row[name + 1:])[1:]
    prefix = ('{"table": "devices", "rows": [' + before + (", " if name else "") + '"').encode()
    suffix = ('"' + (", " if after != "]" else "") + after + "]}\n").encode()
    bad = tmp_path / "long-name.export"
    write_long_line(bad, records, i, prefix, b"n", 256 << 20, suffix)
    code, out, err = import_cli(capsys, db_url, bad)
    assert_one_line(code, out, err, f"record {i + 1} is longer than {MAX_LINE_BYTES >> 20} MiB")
    assert state_is_empty(db_url)


MEMORY_CAP = 3 << 30  # the cap on the import's address space
RUN_CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from fleetscope.cli import main
try:
    code = main(sys.argv[2:])
finally:
    # VmHWM: this process image's own peak. ru_maxrss would also count the parent's, which the
    # child's pre-exec image shared (a busy test worker's few hundred MiB).
    hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
    open(sys.argv[1], "w").write(hwm.split()[1])
sys.exit(code)
"""


@pytest.mark.server
def test_a_4_mib_gzip_holding_one_4_gib_line_is_one_line_in_bounded_memory(
    export: Path, db_url: str, tmp_path: Path
) -> None:
    records = read_records(export)
    i = first_rows(records, "devices")
    bomb = tmp_path / "bomb.export"
    write_long_line(bomb, records, i, b'{"table": "devices", "rows": [["', b"A", 4 << 30, b'"]]}\n')
    assert bomb.stat().st_size < 8 << 20
    maxrss = tmp_path / "maxrss"
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", RUN_CAPPED.format(cap=MEMORY_CAP), str(maxrss), "db", "import", "--db", db_url,
                          "--from", str(bomb)], capture_output=True, text=True, timeout=120)
    said = [line for line in out.stderr.splitlines() if not line.startswith("  ")]
    assert out.returncode == 1 and len(said) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"record {i + 1} is longer than {MAX_LINE_BYTES >> 20} MiB" in said[0] and said[0].endswith("was not changed")
    peak_mib = int(maxrss.read_text()) >> 10
    assert peak_mib < 400, f"the import's memory peaked at {peak_mib} MiB"
    assert time.monotonic() - started < 60, "the rest of the line is not read"
    assert state_is_empty(db_url)


# ------------------------------------------------------------------------------------ fuzzing

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a record a value could be swapped (the record's keys, list items, row values)."""
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):  # the first few of a long list are as good as any
            out += _paths(v, (*at, i))
    return out


def _set(record: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        record = record[step]
    record[path[-1]] = value


@st.composite
def hostile_files(draw: st.DrawFn, records: Records, how: st.SearchStrategy[str]) -> tuple[list[Any] | bytes, str]:
    """A mutation of the good export: (the records, some as raw lines; or the gzip file's raw bytes), and what was done."""
    rs: list[Any] = copy.deepcopy(records)
    how = draw(how)
    i = draw(st.integers(0, len(rs) - 1))
    if how == "value":
        paths = _paths(rs[i])
        if paths:
            _set(rs[i], draw(st.sampled_from(paths)), draw(json_values))
    elif how == "drop":
        del rs[i]
    elif how == "repeat":
        rs.insert(i, copy.deepcopy(rs[i]))
    elif how == "swap" and i + 1 < len(rs):
        rs[i], rs[i + 1] = rs[i + 1], rs[i]
    elif how == "cut line":
        line = json.dumps(rs[i]).encode()
        rs[i] = line[: draw(st.integers(0, len(line)))] + draw(st.sampled_from([b"\n", b""]))
    elif how == "garbage line":
        rs[i] = draw(st.binary(max_size=40)).replace(b"\n", b" ") + b"\n"
    elif how == "nest":
        depth = draw(st.integers(1, 5000))
        rs[i] = (json.dumps(rs[i])[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}\n").encode()
    if how == "bytes":
        raw = bytearray(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rs), mtime=0))
        for _ in range(draw(st.integers(1, 3))):
            k = draw(st.integers(0, len(raw) - 1))
            raw[k] ^= draw(st.integers(1, 255))
        return bytes(raw[: draw(st.integers(0, len(raw)))]), how
    if draw(st.booleans()):  # keep the counts in agreement, so the mutation itself is what is checked
        plain = [r for r in rs if isinstance(r, dict)]
        if len(plain) == len(rs) and all(isinstance(r.get("tables", []), list) for r in plain[:1]):
            try:
                recount(rs)
            except (KeyError, TypeError, AttributeError, IndexError):
                pass
    return rs, how


@pytest.fixture
def loaded(export: Path, db_url: str) -> str:
    """``db_url`` holding the good export's fleet, so that "unchanged" means something."""
    assert main(["db", "import", "--db", db_url, "--from", str(export)]) == 0
    return db_url


RECORD_MUTATIONS = st.sampled_from(["value", "drop", "repeat", "swap", "cut line", "garbage line", "nest"])


@pytest.mark.server
@pytest.mark.parametrize("level", ["records", "gzip bytes"])
def test_any_mutated_cut_or_garbled_file_is_one_line_and_leaves_the_target_unchanged(
    capsys: pytest.CaptureFixture[str], export: Path, loaded: str, tmp_path: Path, level: str
) -> None:
    """Mutations of the records (a value anywhere replaced by any JSON value, a record dropped,
    repeated, moved, cut, garbled or nested deep; the counts made to agree or not), or of the
    compressed bytes (flipped, cut)."""
    good = read_records(export)
    before = dump(loaded)
    path = tmp_path / "fuzzed.export"

    @FUZZ
    @given(hostile_files(good, RECORD_MUTATIONS if level == "records" else st.just("bytes")))
    def one(mutation: tuple[list[Any] | bytes, str]) -> None:
        content, how = mutation
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            write_records(path, content)
        capsys.readouterr()
        code, out, err = import_cli(capsys, loaded, path, "--replace")
        if code == 0:  # the mutation left a file that is whole (a value changed to one its column takes)
            assert main(["db", "import", "--db", loaded, "--from", str(export), "--replace"]) == 0
            capsys.readouterr()
        else:
            assert_one_line(code, out, err)
        assert dump(loaded) == before, how

    one()


def test_an_export_splits_records_past_the_record_bound() -> None:
    """A chunk whose record would pass RECORD_BYTES is written as several (an import reads lines with a bound)."""
    from fleetscope.collector.commands import db_transfer

    rows = [["x" * 1000] for _ in range(10_000)]
    lines = list(db_transfer._lines({"table": "log_events", "rows": rows}))
    assert len(lines) > 1 and all(len(line) <= db_transfer.RECORD_BYTES for line in lines)
    assert [r for line in lines for r in json.loads(line)["rows"]] == rows
