"""The Grafana dashboards under deploy/grafana: valid dashboards, every SQL identifier real, and
every SQL query returning rows on a PostgreSQL filled by real agents through a real collector."""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
SQL_BOARDS = ["fleetscope-fleet.json", "fleetscope-device.json", "fleetscope-incidents.json"]
NS = 10**9
DCGM_METRICS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
DCGM_LABELS = {"gpu", "Hostname", "modelName", "UUID"}


def load(name: str) -> dict[str, Any]:
    return json.loads((GRAFANA / "dashboards" / name).read_text())


def targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in board["panels"]:
        for t in panel["targets"]:
            yield panel, t


def sql_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, SQL) for every panel target and query variable of a PostgreSQL dashboard."""
    out = [(f"{p['title']} / {t['refId']}", t["rawSql"]) for p, t in targets(board)]
    out += [(f"variable {v['name']}", v["query"]) for v in board["templating"]["list"] if v["type"] == "query"]
    return out


# ------------------------------------------------------------------------------ the files


def test_the_files_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("build_dashboards", GRAFANA / "build_dashboards.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sorted(module.DASHBOARDS) == [p.name for p in DASHBOARDS]
    assert module.main(["--check"]) == 0, "run python deploy/grafana/build_dashboards.py"


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_a_dashboard_has_what_grafana_needs(path: Path) -> None:
    board = json.loads(path.read_text())
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["uid"] and len(board["uid"]) <= 40 and board["title"]
    assert board["time"]["from"].startswith("now-") and board["time"]["to"] == "now"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ds_type = variables["datasource"]["query"]
    assert ds_type in ("grafana-postgresql-datasource", "prometheus")
    assert board["panels"], "no panels"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["type"] in ("timeseries", "stat", "table", "barchart") and panel["title"]
        pos = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= pos.keys() and pos["x"] + pos["w"] <= 24
        assert panel["datasource"] == {"type": ds_type, "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for t in panel["targets"]:
            query = t["rawSql"] if ds_type != "prometheus" else t["expr"]
            assert query.strip()
            if ds_type != "prometheus":
                assert t["rawQuery"] is True and t["format"] in ("time_series", "table")
                if t["format"] == "time_series":
                    assert " AS time" in query and " AS value" in query, panel["title"]
            # every variable a query uses is defined
            for name in re.findall(r"\$\{?([A-Za-z]\w*)", query):
                assert name in variables, (panel["title"], name)
    # panels do not overlap
    cells = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_the_dcgm_dashboard_speaks_dcgm_exporter_names() -> None:
    board = load("fleetscope-dcgm.json")
    exprs = [t["expr"] for _, t in targets(board)]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    metrics = {m for e in exprs for m in re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*\{", e)}
    assert metrics == DCGM_METRICS, metrics
    for e in exprs:
        labels = set(re.findall(r"([A-Za-z_]\w*)\s*=~?\s*\"", e))
        for group in re.findall(r"\bby\s*\(([^)]*)\)", e):
            labels |= {x.strip() for x in group.split(",")}
        labels |= set(re.findall(r"label_values\([^,]+,\s*(\w+)\)", e))
        assert labels <= DCGM_LABELS, (e, labels - DCGM_LABELS)
    legends = " ".join(t["legendFormat"] for _, t in targets(board))
    assert {"{{Hostname}}", "{{gpu}}", "{{modelName}}"} <= set(re.findall(r"\{\{\w+\}\}", legends))
    # One series per GPU of each device, also where devices share an OS hostname (cloned Jetson
    # images): a per-GPU grouping keeps the GPU's UUID.
    per_gpu = [g for e in exprs for g in re.findall(r"\bby\s*\(([^)]*)\)", e) if "gpu" in g]
    assert per_gpu and all("UUID" in g and "Hostname" in g for g in per_gpu), per_gpu


def test_the_dcgm_names_are_what_the_fleet_exposition_exports() -> None:
    exposition = pytest.importorskip("fleetscope.collector.observability.fleet_exposition")
    exported = {f.name for f in exposition.GPU_FIELDS}
    assert DCGM_METRICS <= exported, DCGM_METRICS - exported


def test_provisioning_examples() -> None:
    yaml = pytest.importorskip("yaml")
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "fleetscope.yaml").read_text())
    types = {d["type"] for d in ds["datasources"]}
    assert ds["apiVersion"] == 1 and types == {"grafana-postgresql-datasource", "prometheus"}
    pg = next(d for d in ds["datasources"] if d["type"] == "grafana-postgresql-datasource")
    assert "password" not in pg and pg["secureJsonData"]["password"].startswith("$")  # no secret in the file
    boards = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "fleetscope.yaml").read_text())
    assert boards["providers"][0]["type"] == "file" and boards["providers"][0]["options"]["path"]


# ------------------------------------------------------------------------------ identifiers


_KEYWORDS = {"where", "join", "left", "right", "cross", "inner", "on", "group", "order", "limit", "union", "as"}


def unknown_identifiers(sql: str) -> list[str]:
    """Tables and alias-qualified columns in ``sql`` that the collector's schema does not have."""
    from fleetscope.collector.storage import rollup_schema  # noqa: F401  (the rollup tables join the metadata)
    from fleetscope.collector.storage.schema import metadata

    tables = {name: {c.name for c in t.columns} for name, t in metadata.tables.items()}
    text = re.sub(r"'(?:[^']|'')*'", "''", sql)  # no identifiers inside string literals
    text = re.sub(r"--[^\n]*", "", text)
    ctes = set(re.findall(r"\b(\w+)\s+AS\s*\(", text, re.IGNORECASE))
    aliases: dict[str, set[str]] = {}
    problems = []
    for m in re.finditer(r"\b(?:FROM|JOIN)\s+(\w+)\b(?!\s*\()(?:\s+(?:AS\s+)?(\w+))?", text, re.IGNORECASE):
        name, alias = m.group(1), m.group(2)
        if name.lower() in ("lateral",):
            continue
        if name not in tables and name not in ctes:
            problems.append(f"table {name}")
            continue
        aliases.setdefault(name, set()).add(name)
        if alias and alias.lower() not in _KEYWORDS:
            aliases.setdefault(alias, set()).add(name)
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\.([A-Za-z_]\w*)", text):
        alias, column = m.group(1), m.group(2)
        bound = aliases.get(alias)
        if bound is None:
            problems.append(f"unbound alias {alias}.{column}")
            continue
        real = [t for t in bound if t in tables]
        if len(real) == len(bound) and not any(column in tables[t] for t in real):
            problems.append(f"column {alias}.{column} (not in {', '.join(sorted(real))})")
    return problems


@pytest.mark.parametrize("name", SQL_BOARDS)
def test_every_sql_query_names_real_tables_and_columns(name: str) -> None:
    pytest.importorskip("sqlalchemy")
    for where, sql in sql_queries(load(name)):
        assert re.search(r"\b(FROM|JOIN)\b", sql, re.IGNORECASE), where
        assert unknown_identifiers(sql) == [], where


def test_the_identifier_check_catches_mistakes() -> None:
    pytest.importorskip("sqlalchemy")
    assert unknown_identifiers("SELECT x.util_gpu_percnt FROM gpu_samples x") == [
        "column x.util_gpu_percnt (not in gpu_samples)"]
    assert unknown_identifiers("SELECT g.ts_ns FROM gpu_sample g") == ["table gpu_sample", "unbound alias g.ts_ns"]
    assert unknown_identifiers("SELECT y.name FROM devices d") == ["unbound alias y.name"]
    assert unknown_identifiers("SELECT d.name FROM devices d WHERE d.kind = 'x.y'") == []


# ------------------------------------------------------------------------------ against PostgreSQL


def grafana_expand(sql: str, *, lo_ns: int, hi_ns: int, device: str) -> str:
    """The SQL Grafana sends for this range and variable: its macros and variables substituted."""
    range_ms = (hi_ns - lo_ns) // 10**6
    interval_ms = max(1000, range_ms // 1000)  # ~1000 points, never under the datasource's 1 s
    iso = lambda ns: datetime.fromtimestamp(ns / NS, tz=timezone.utc).isoformat().replace("+00:00", "Z")  # noqa: E731
    sql = re.sub(r"\$__unixEpochNanoFilter\(([^)]+)\)", lambda m: f"{m[1]} >= {lo_ns} AND {m[1]} <= {hi_ns}", sql)
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", lambda m: f"{m[1]} BETWEEN '{iso(lo_ns)}' AND '{iso(hi_ns)}'", sql)
    sql = sql.replace("$__unixEpochNanoFrom()", str(lo_ns)).replace("$__unixEpochNanoTo()", str(hi_ns))
    sql = sql.replace("$__unixEpochFrom()", str(lo_ns // NS)).replace("$__unixEpochTo()", str(hi_ns // NS))
    sql = sql.replace("$__timeFrom()", f"'{iso(lo_ns)}'").replace("$__timeTo()", f"'{iso(hi_ns)}'")
    sql = sql.replace("$__interval_ms", str(interval_ms)).replace("$__interval", f"'{interval_ms}ms'")
    quoted = "'" + device.replace("'", "''") + "'"
    sql = sql.replace("${device:sqlstring}", quoted).replace("${device}", device).replace("$device", device)
    assert "$" not in sql, f"a macro the test does not know: {sql}"
    return sql


def _stored(url: str) -> bool:
    """The server's warning line and an Xid incident are in."""
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            warning = conn.execute(text("SELECT count(*) FROM log_events WHERE level = 'warning'")).scalar_one()
            xid = conn.execute(text("SELECT count(*) FROM incidents WHERE kind = 'gpu_xid'")).scalar_one()
    finally:
        engine.dispose()
    return bool(warning and xid)


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A PostgreSQL database filled by simulated devices through real agents and a real collector,
    with SDK latency, an Xid and a warning line on one server, rolled up to minutes and hours."""
    pytest.importorskip("sqlalchemy")
    from fleetscope.agent.classify import classify_event
    from fleetscope.agent.tools.simulate import XID_LINE, build_fleet
    from fleetscope.collector.ingest.server import Collector, CollectorSettings
    from fleetscope.collector.jobs.rollup import RollupJob
    from fleetscope.collector.storage.engine import make_engine
    from tests.conftest import PG_ADMIN_URL, _pg_admin
    from tests.dashboard.pipeline import _classified, _sdk_traffic, wait_for
    from tests.helpers import table_count

    tmp = tmp_path_factory.mktemp("grafana")
    admin = _pg_admin()
    name = "fleetscope_grafana_" + secrets.token_hex(6)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=url, tokens=frozenset(["tok"]), grace_s=2.0,
                                            rollups=False))
    try:
        address = f"127.0.0.1:{collector.start()}"
        fleet = build_fleet(collectors=[address], token="tok", devices=4, state_dir=tmp / "sim", interval_s=0.5,
                            jetson_share=0.5, gpus_per_server=2, incident_every_s=2.0, classify=classify_event,
                            name_prefix="graf")
        server = fleet.agents[-1]
        fleet.start()
        try:
            wait_for(lambda: fleet.acked() >= 8, 30, "first batches")
            _sdk_traffic(server, str(tmp / "sdk.sock"), [3.0 + (i % 30) / 10 for i in range(300)],
                         RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), seconds=2)
            _classified(server, XID_LINE, "critical", "kmsg")
            _classified(server, "dataloader worker 3 restarted after a timeout", "warning", "/var/log/train.log")
            wait_for(lambda: table_count(url, "latency_histograms") > 0 and _stored(url), 30,
                     "latency, the warning line and the Xid stored")
        finally:
            fleet.stop()
        engine = make_engine(url)
        try:
            # The agents are stopped: roll as the job would once their last minute and hour have
            # closed (a negative settle stands for the time passing with no newer data).
            report = RollupJob(engine, settle_s=-3600.0).run_once(now_ns=time.time_ns() + 2 * 3600 * NS)
            assert report.ran
        finally:
            engine.dispose()
        assert table_count(url, "gpu_rollups") > 0 and table_count(url, "latency_rollups") > 0
        yield url, server.settings.name
    finally:
        collector.stop()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


RANGES = {"1h (minute rollups)": 3600, "12h (minute rollups)": 12 * 3600, "7d (hour rollups)": 7 * 86400}


@pytest.mark.server
@pytest.mark.parametrize("name", SQL_BOARDS)
def test_every_sql_query_returns_rows_on_a_real_fleet(fleet_db: tuple[str, str], name: str) -> None:
    from sqlalchemy import create_engine

    from fleetscope.collector.storage.engine import normalise_url

    url, device = fleet_db
    engine = create_engine(normalise_url(url))
    empty = []
    try:
        with engine.connect() as conn:
            hi = time.time_ns()
            for where, sql in sql_queries(load(name)):
                for label, seconds in RANGES.items():
                    expanded = grafana_expand(sql, lo_ns=hi - seconds * NS, hi_ns=hi, device=device)
                    try:
                        rows = conn.exec_driver_sql(expanded).all()
                    except Exception as exc:
                        raise AssertionError(f"{name}: {where} ({label}) failed: {exc}") from exc
                    if not rows or all(v is None for v in rows[0]):
                        empty.append(f"{where} ({label})")
                    if " AS time" in sql and " AS value" in sql and rows:
                        assert all(r[0] is not None and r[2] is not None for r in rows), where
    finally:
        engine.dispose()
    assert empty == [], f"{name}: queries without rows: {empty}"


@pytest.mark.server
def test_a_long_range_reads_hour_rollups_and_a_short_one_minute_rollups(fleet_db: tuple[str, str]) -> None:
    """The same panel, one GPU: hour buckets for a week, minute buckets for a quarter of an hour
    (raw samples are compressed chunks that SQL cannot read)."""
    from sqlalchemy import create_engine

    from fleetscope.collector.storage.engine import normalise_url

    url, device = fleet_db
    sql = next(t["rawSql"] for p, t in targets(load("fleetscope-device.json")) if p["title"] == "GPU utilisation")
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            hi = time.time_ns()
            week = conn.exec_driver_sql(grafana_expand(sql, lo_ns=hi - 7 * 86400 * NS, hi_ns=hi, device=device)).all()
            short = conn.exec_driver_sql(grafana_expand(sql, lo_ns=hi - 900 * NS, hi_ns=hi, device=device)).all()
    finally:
        engine.dispose()
    gpus = {r[1] for r in short}
    assert gpus == {"GPU 0", "GPU 1"}
    assert all(r[0].second == 0 for r in short), "minute rollups, placed at their minute"
    # a week: the hour rollups, one row per GPU (two if the run crossed an hour), each placed at its
    # hour's start (on Grafana's 604.8 s grid), not where the samples were
    assert {r[1] for r in week} == gpus and len(week) <= 2 * len(gpus)
    first_hour = min(r[0] for r in short).astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
    week_first = min(r[0] for r in week)
    assert 0 <= (first_hour - week_first).total_seconds() < 604.8
