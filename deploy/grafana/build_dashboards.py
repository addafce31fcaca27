"""Write the Grafana dashboards in ``deploy/grafana/dashboards/`` (run it after changing a panel).

    python deploy/grafana/build_dashboards.py           # write the JSON files
    python deploy/grafana/build_dashboards.py --check   # exit 1 if a file is not what this writes

Four dashboards:

* ``fleetscope-fleet.json``, ``fleetscope-device.json``, ``fleetscope-incidents.json``: the
  PostgreSQL datasource, reading fleetscope's own tables. Time series read minute rollups for
  ranges up to 2 days and hour rollups beyond, and tail rows after what the rollup job has
  closed (``rollup_progress``; only collectors before revision 0011 wrote a row per sample), so a
  week is a few thousand rows per series. The collector stores raw samples as compressed chunks
  (``collector/storage/batch_chunks.py``), which SQL cannot read: Grafana's charts reach the
  rollup job's last pass (a minute or two behind now); the fleetscope dashboard reads the chunks
  and reaches now.
* ``fleetscope-dcgm.json``: the Prometheus datasource over the collector's fleet exposition, which
  carries GPU readings under dcgm-exporter's names and labels (``DCGM_FI_DEV_GPU_UTIL``, ...,
  ``gpu``, ``Hostname``, ``modelName``), for servers and Jetson drones alike. Series are grouped by
  ``Hostname`` (the exposition puts the device's name there) and ``UUID``, so each GPU of each
  device is its own series even where devices share an OS hostname (cloned Jetson images).

Timestamps are nanoseconds since the epoch (``ts_ns``); Grafana's ``$__unixEpochNano*`` macros
filter on them directly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
SCHEMA_VERSION = 39
PG = {"type": "grafana-postgresql-datasource", "uid": "${datasource}"}
PROM = {"type": "prometheus", "uid": "${datasource}"}
NS = 1_000_000_000
HOUR_ROLLUPS_FROM_NS = 2 * 86400 * NS  # and longer than 2 days hour rollups

DEVICE = "${device:sqlstring}"
# Grafana's interval as a bucket of nanoseconds, for grouping rows by time.
BUCKET = "floor({col} / ($__interval_ms * 1000000.0)) * $__interval_ms / 1000.0"

# --------------------------------------------------------------------------- SQL


def rolled_series(
    *,
    raw: str,
    rollup: str,
    metric: str,
    raw_value: str,
    rollup_value: str,
    raw_ts: str = "ts_ns",
    where: str = "",
) -> str:
    """A time series (time, metric, value) from ``rollup`` for long ranges and ``raw`` otherwise.

    Both branches alias their table ``x`` and join ``devices d``, so ``metric`` and ``where`` are
    written once. The raw branch reads only after what the rollups hold for the chosen step.
    """
    extra = f"\n  AND {where}" if where else ""
    return f"""WITH win AS (
  SELECT $__unixEpochNanoFrom()::bigint AS lo, $__unixEpochNanoTo()::bigint AS hi
), res AS (
  SELECT CASE WHEN win.hi - win.lo > {HOUR_ROLLUPS_FROM_NS} THEN 3600
              ELSE 60 END AS step_s
  FROM win
), rolled AS (
  SELECT p.device_id, p.rolled_until_ns FROM rollup_progress p JOIN res ON p.step_s = res.step_s
)
SELECT to_timestamp({BUCKET.format(col="x.bucket_ns")}) AS time, {metric} AS metric, {rollup_value} AS value
FROM {rollup} x
JOIN devices d ON d.id = x.device_id
JOIN res ON x.step_s = res.step_s
CROSS JOIN win
WHERE x.bucket_ns + x.step_s * {NS}::bigint > win.lo AND x.bucket_ns <= win.hi{extra}
GROUP BY 1, 2
UNION ALL
SELECT to_timestamp({BUCKET.format(col=f"x.{raw_ts}")}) AS time, {metric} AS metric, {raw_value} AS value
FROM {raw} x
JOIN devices d ON d.id = x.device_id
LEFT JOIN rolled r ON r.device_id = x.device_id
WHERE $__unixEpochNanoFilter(x.{raw_ts}) AND x.{raw_ts} >= coalesce(r.rolled_until_ns, 0){extra}
GROUP BY 1, 2
ORDER BY 1, 2"""


def weighted(col: str) -> str:
    return f"sum(x.{col} * x.n) / nullif(sum(x.n), 0)"


def gpu_series(raw_col: str, rollup_value: str, raw_agg: str, metric: str, where: str = "") -> str:
    return rolled_series(raw="gpu_samples", rollup="gpu_rollups", metric=metric, raw_value=f"{raw_agg}(x.{raw_col})",
                         rollup_value=rollup_value, where=where)


def host_series(raw_col: str, rollup_value: str, raw_agg: str, metric: str, where: str = "") -> str:
    return rolled_series(raw="host_samples", rollup="host_rollups", metric=metric, raw_value=f"{raw_agg}(x.{raw_col})",
                         rollup_value=rollup_value, where=where)


INCIDENT_OVERLAPS = "i.ts_ns <= $__unixEpochNanoTo() AND i.last_seen_ns >= $__unixEpochNanoFrom()"

# --------------------------------------------------------------------------- panels


class Board:
    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.y = 0
        self.x = 0
        self.row_h = 0

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def sql_target(sql: str, fmt: str = "time_series", ref: str = "A") -> dict[str, Any]:
    return {"refId": ref, "datasource": PG, "editorMode": "code", "format": fmt, "rawQuery": True, "rawSql": sql}


def prom_target(expr: str, legend: str, ref: str = "A", instant: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"refId": ref, "datasource": PROM, "editorMode": "code", "expr": expr, "legendFormat": legend,
                         "range": not instant, "instant": instant}
    return t


def timeseries(title: str, targets: list[dict[str, Any]], unit: str, ds: dict[str, str], description: str = "",
               **defaults: Any) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": ds,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0, "spanNulls": True},
                                     **defaults}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def stat(title: str, targets: list[dict[str, Any]], ds: dict[str, str], unit: str = "none", description: str = "") -> dict[str, Any]:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": ds,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "none", "textMode": "auto"},
    }


def table(title: str, targets: list[dict[str, Any]], ds: dict[str, str], description: str = "") -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": ds,
        "targets": targets,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
    }


def barchart(title: str, targets: list[dict[str, Any]], ds: dict[str, str], description: str = "") -> dict[str, Any]:
    return {
        "type": "barchart",
        "title": title,
        "description": description,
        "datasource": ds,
        "targets": targets,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"orientation": "horizontal", "showValue": "auto", "legend": {"showLegend": False}},
    }


def datasource_var(kind: str, label: str) -> dict[str, Any]:
    return {"name": "datasource", "label": label, "type": "datasource", "query": kind, "current": {},
            "hide": 0, "refresh": 1, "options": [], "regex": ""}


def dashboard(uid: str, title: str, description: str, board: Board, variables: list[dict[str, Any]],
              time_from: str = "now-6h", tags: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["fleetscope", *tags],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": time_from, "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [{"title": "fleetscope", "type": "dashboards", "tags": ["fleetscope"], "asDropdown": True}],
        "panels": board.panels,
    }


# --------------------------------------------------------------------------- the dashboards


# A device's state as fleetscope.collector.query.devices.liveness gives it: "stopped" when its
# agent said so, else offline once silent past its threshold: the offline detector's settings as
# its last pass recorded them (detector_progress: agent_offline, device 0, key _pass), 3 of the
# device's batch intervals (as its agent registered; 1 s if it did not say) and at least 10 s
# by default, or the collector's --offline-after.
DEVICES_WITH_RULE = ("FROM devices d LEFT JOIN detector_progress r\n"
                     "  ON r.detector = 'agent_offline' AND r.device_id = 0 AND r.key = '_pass'")
OFFLINE_AFTER_S = ("COALESCE((r.state->>'offline_after_s')::float, GREATEST(COALESCE((r.state->>'offline_min_s')::float, 10),\n"
                   "  COALESCE((r.state->>'offline_intervals')::float, 3)"
                   " * GREATEST(1, COALESCE((d.inventory->>'batch_interval_s')::float, 1))))")
DEVICE_STATE = ("CASE WHEN (d.counters->>'stopped')::boolean THEN 'stopped'\n"
                f"  WHEN d.last_seen_ns >= (extract(epoch FROM now()) - {OFFLINE_AFTER_S}) * 1000000000 THEN 'online'\n"
                "  ELSE 'offline' END")


def fleet() -> dict[str, Any]:
    b = Board()
    b.add(stat("Devices", [sql_target("SELECT count(*) AS devices FROM devices d", "table")], PG), 4, 4)
    b.add(stat("Online", [sql_target(
        f"SELECT count(*) AS online {DEVICES_WITH_RULE}\n"
        f"WHERE {DEVICE_STATE} = 'online'", "table")], PG, description=
        "Heard from within the offline threshold: 3 of the device's batch intervals, at least 10 s, or the "
        "collector's --offline-after (as `fleetscope devices`, the dashboard and the detectors)."), 5, 4)
    b.add(stat("Jetson drones", [sql_target(
        "SELECT count(*) AS jetson FROM devices d WHERE d.kind = 'jetson'", "table")], PG), 5, 4)
    b.add(stat("GPU servers", [sql_target(
        "SELECT count(*) AS servers FROM devices d WHERE d.kind = 'server'", "table")], PG), 5, 4)
    b.add(stat("Open incidents", [sql_target(
        "SELECT count(*) AS open FROM incidents i WHERE i.state = 'open'", "table")], PG), 5, 4)
    b.add(table("Devices", [sql_target(
        "SELECT d.name AS device, d.kind, d.hostname,\n"
        f"  {DEVICE_STATE} AS state,\n"
        "  to_timestamp(d.last_seen_ns / 1e9) AS last_seen, d.agent_version, d.labels::text AS labels,\n"
        "  d.batches_stored, d.clock_skew_ns / 1e9 AS clock_skew_s\n"
        f"{DEVICES_WITH_RULE} ORDER BY d.name", "table")], PG,
        "Every registered device: online, offline (silent past its threshold: 3 of its batch intervals, at least "
        "10 s, or the collector's --offline-after) or stopped (its agent said it stopped cleanly)."), 24, 8)
    by_device = "d.name"
    b.add(timeseries("GPU utilisation (mean over the device's GPUs)", [sql_target(
        gpu_series("util_gpu_percent", weighted("util_avg"), "avg", by_device))], "percent", PG), 12, 8)
    b.add(timeseries("GPU temperature (hottest GPU)", [sql_target(
        gpu_series("temp_c", "max(x.temp_max)", "max", by_device))], "celsius", PG), 12, 8)
    b.add(timeseries("GPU power (mean per GPU)", [sql_target(
        gpu_series("power_w", weighted("power_avg"), "avg", by_device))], "watt", PG), 12, 8)
    b.add(timeseries("GPU memory used (largest GPU)", [sql_target(
        gpu_series("memory_used_bytes", "max(x.memory_used_max)", "max", by_device))], "bytes", PG), 12, 8)
    b.add(timeseries("Host CPU", [sql_target(
        host_series("cpu_percent", weighted("cpu_avg"), "avg", by_device))], "percent", PG), 12, 8)
    b.add(timeseries("Host memory used", [sql_target(
        host_series("mem_used_bytes", weighted("mem_used_avg"), "avg", by_device))], "bytes", PG), 12, 8)
    b.add(barchart("Incidents in range, by kind", [sql_target(
        "SELECT i.kind, count(*) AS incidents FROM incidents i\n"
        f"WHERE {INCIDENT_OVERLAPS}\nGROUP BY i.kind ORDER BY 2 DESC", "table")], PG), 12, 8)
    b.add(barchart("Incidents in range, by device", [sql_target(
        "SELECT d.name AS device, count(*) AS incidents FROM incidents i JOIN devices d ON d.id = i.device_id\n"
        f"WHERE {INCIDENT_OVERLAPS}\nGROUP BY d.name ORDER BY 2 DESC LIMIT 20", "table")], PG), 12, 8)
    return dashboard("fleetscope-fleet", "fleetscope: fleet", "Every device's GPUs and host at a glance (PostgreSQL).",
                     b, [datasource_var("grafana-postgresql-datasource", "fleetscope database")], tags=("postgresql",))


def device() -> dict[str, Any]:
    b = Board()
    one = f"d.name = {DEVICE}"
    per_gpu = "'GPU ' || x.gpu_index"
    b.add(table("Device", [sql_target(
        "SELECT d.name AS device, d.kind, d.hostname, d.agent_version,\n"
        "  to_timestamp(d.first_seen_ns / 1e9) AS first_seen, to_timestamp(d.last_seen_ns / 1e9) AS last_seen,\n"
        "  d.clock_skew_ns / 1e9 AS clock_skew_s, d.batches_stored, d.batches_rejected, d.labels::text AS labels\n"
        f"FROM devices d WHERE {one}", "table")], PG), 24, 4)
    b.add(timeseries("GPU utilisation", [sql_target(
        gpu_series("util_gpu_percent", weighted("util_avg"), "avg", per_gpu, one))], "percent", PG), 12, 8)
    b.add(timeseries("GPU memory used", [sql_target(
        gpu_series("memory_used_bytes", "max(x.memory_used_max)", "max", per_gpu, one))], "bytes", PG), 12, 8)
    b.add(timeseries("GPU temperature", [sql_target(
        gpu_series("temp_c", "max(x.temp_max)", "max", per_gpu, one))], "celsius", PG), 12, 8)
    b.add(timeseries("GPU power", [sql_target(
        gpu_series("power_w", weighted("power_avg"), "avg", per_gpu, one))], "watt", PG), 12, 8)
    b.add(timeseries("SM clock", [sql_target(
        gpu_series("sm_clock_mhz", weighted("sm_clock_avg"), "avg", per_gpu, one))], "MHz", PG), 12, 8)
    b.add(timeseries("Host CPU and memory", [
        sql_target(host_series("cpu_percent", weighted("cpu_avg"), "avg", "'CPU'", one)),
        sql_target(host_series("mem_used_bytes * 100.0 / nullif(x.mem_total_bytes, 0)",
                               "sum(x.mem_used_avg * x.n) * 100.0 / nullif(sum(x.mem_total_max * x.n), 0)", "avg",
                               "'memory'", one), ref="B"),
    ], "percent", PG), 12, 8)
    b.add(timeseries("Latency, mean per operation (SDK)", [sql_target(rolled_series(
        raw="latency_histograms", rollup="latency_rollups", metric="x.name", raw_ts="start_ns",
        raw_value="sum(x.sum_ns) / nullif(sum(x.count), 0) / 1e6",
        rollup_value="sum(x.sum_ns) / nullif(sum(x.count), 0) / 1e6", where=one))], "ms", PG,
        "From the SDK's latency histograms; percentiles are in the fleetscope dashboard and CLI."), 12, 8)
    b.add(timeseries("Calls per interval (SDK)", [sql_target(rolled_series(
        raw="latency_histograms", rollup="latency_rollups", metric="x.name", raw_ts="start_ns",
        raw_value="sum(x.count)", rollup_value="sum(x.count)", where=one))], "short", PG), 12, 8)
    b.add(table("Incidents", [sql_target(
        "SELECT to_timestamp(i.ts_ns / 1e9) AS time, i.kind, i.severity, i.state, i.count, i.gpu_index, i.title,\n"
        "  to_timestamp(i.last_seen_ns / 1e9) AS last_seen\n"
        "FROM incidents i JOIN devices d ON d.id = i.device_id\n"
        f"WHERE {one} AND {INCIDENT_OVERLAPS}\nORDER BY i.ts_ns DESC LIMIT 200", "table")], PG), 24, 8)
    b.add(table("Log lines (warning and worse)", [sql_target(
        "SELECT to_timestamp(x.ts_ns / 1e9) AS time, x.level, x.source, x.message\n"
        "FROM log_events x JOIN devices d ON d.id = x.device_id\n"
        f"WHERE {one} AND $__unixEpochNanoFilter(x.ts_ns) AND x.level IN ('warning', 'error', 'critical')\n"
        "ORDER BY x.ts_ns DESC LIMIT 500", "table")], PG), 24, 8)
    device_var = {
        "name": "device", "label": "device", "type": "query", "datasource": PG,
        "query": "SELECT d.name FROM devices d ORDER BY d.name", "definition": "SELECT d.name FROM devices d ORDER BY d.name",
        "refresh": 1, "sort": 1, "multi": False, "includeAll": False, "current": {}, "hide": 0, "options": [], "regex": "",
    }
    return dashboard("fleetscope-device", "fleetscope: device", "One device: its GPUs, host, SDK latency, incidents "
                     "and log lines (PostgreSQL).", b,
                     [datasource_var("grafana-postgresql-datasource", "fleetscope database"), device_var],
                     tags=("postgresql",))


def incidents() -> dict[str, Any]:
    b = Board()
    b.add(stat("Open incidents by severity", [sql_target(
        "SELECT i.severity, count(*) AS open FROM incidents i WHERE i.state = 'open' GROUP BY i.severity "
        "ORDER BY i.severity", "table")], PG), 8, 5)
    b.add(stat("Incidents in range", [sql_target(
        f"SELECT count(*) AS incidents FROM incidents i WHERE {INCIDENT_OVERLAPS}", "table")], PG), 8, 5)
    b.add(stat("Occurrences in range (repeats counted)", [sql_target(
        f"SELECT coalesce(sum(i.count), 0) AS occurrences FROM incidents i WHERE {INCIDENT_OVERLAPS}", "table")], PG),
        8, 5)
    b.add(timeseries("New incidents by kind", [sql_target(
        f"SELECT to_timestamp({BUCKET.format(col='i.ts_ns')}) AS time, i.kind AS metric, count(*) AS value\n"
        "FROM incidents i WHERE $__unixEpochNanoFilter(i.ts_ns)\nGROUP BY 1, 2 ORDER BY 1, 2")], "short", PG,
        custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 80, "stacking": {"mode": "normal"}}), 24, 8)
    b.add(table("Incidents", [sql_target(
        "SELECT to_timestamp(i.ts_ns / 1e9) AS time, d.name AS device, d.kind AS device_kind, i.kind, i.severity,\n"
        "  i.state, i.count, i.gpu_index, i.process_name, i.title, to_timestamp(i.last_seen_ns / 1e9) AS last_seen,\n"
        "  i.origin, i.id\n"
        "FROM incidents i JOIN devices d ON d.id = i.device_id\n"
        f"WHERE {INCIDENT_OVERLAPS}\nORDER BY i.ts_ns DESC LIMIT 500", "table")], PG,
        "Incidents whose span (first to last occurrence) overlaps the range; 'fleetscope incident ID' shows one whole."),
        24, 10)
    b.add(table("GPU Xid errors", [sql_target(
        "SELECT to_timestamp(i.ts_ns / 1e9) AS time, d.name AS device, i.facts->>'xid' AS xid, i.gpu_index,\n"
        "  i.count, i.state, i.title\n"
        "FROM incidents i JOIN devices d ON d.id = i.device_id\n"
        f"WHERE i.kind = 'gpu_xid' AND {INCIDENT_OVERLAPS}\nORDER BY i.ts_ns DESC LIMIT 200", "table")], PG), 12, 8)
    b.add(barchart("Devices with the most incidents", [sql_target(
        "SELECT d.name AS device, count(*) AS incidents FROM incidents i JOIN devices d ON d.id = i.device_id\n"
        f"WHERE {INCIDENT_OVERLAPS}\nGROUP BY d.name ORDER BY 2 DESC LIMIT 15", "table")], PG), 12, 8)
    return dashboard("fleetscope-incidents", "fleetscope: incidents", "OOMs, Xids, TensorRT errors, detector findings "
                     "(PostgreSQL).", b, [datasource_var("grafana-postgresql-datasource", "fleetscope database")],
                     time_from="now-7d", tags=("postgresql",))


DCGM_SEL = 'Hostname=~"$Hostname", gpu=~"$gpu"'


def dcgm() -> dict[str, Any]:
    b = Board()
    b.add(stat("GPUs", [prom_target(f"count(DCGM_FI_DEV_GPU_UTIL{{{DCGM_SEL}}})", "GPUs", instant=True)], PROM), 6, 4)
    b.add(stat("Mean GPU utilisation", [prom_target(f"avg(DCGM_FI_DEV_GPU_UTIL{{{DCGM_SEL}}})", "util", instant=True)],
               PROM, "percent"), 6, 4)
    b.add(stat("Power draw", [prom_target(f"sum(DCGM_FI_DEV_POWER_USAGE{{{DCGM_SEL}}})", "power", instant=True)],
               PROM, "watt"), 6, 4)
    b.add(stat("Hottest GPU", [prom_target(f"max(DCGM_FI_DEV_GPU_TEMP{{{DCGM_SEL}}})", "temp", instant=True)],
               PROM, "celsius"), 6, 4)
    legend = "{{Hostname}} GPU {{gpu}} ({{modelName}})"
    b.add(timeseries("GPU utilisation", [prom_target(
        f"avg by (Hostname, UUID, gpu, modelName) (DCGM_FI_DEV_GPU_UTIL{{{DCGM_SEL}}})", legend)], "percent", PROM), 12, 8)
    b.add(timeseries("Framebuffer memory used", [prom_target(
        f"avg by (Hostname, UUID, gpu, modelName) (DCGM_FI_DEV_FB_USED{{{DCGM_SEL}}})", legend)], "decmbytes", PROM,
        "DCGM_FI_DEV_FB_USED is in MiB, as dcgm-exporter exports it."), 12, 8)
    b.add(timeseries("GPU temperature", [prom_target(
        f"max by (Hostname, UUID, gpu, modelName) (DCGM_FI_DEV_GPU_TEMP{{{DCGM_SEL}}})", legend)], "celsius", PROM), 12, 8)
    b.add(timeseries("Power draw", [prom_target(
        f"avg by (Hostname, UUID, gpu, modelName) (DCGM_FI_DEV_POWER_USAGE{{{DCGM_SEL}}})", legend)], "watt", PROM), 12, 8)
    b.add(table("GPUs by model", [prom_target(
        f"count by (modelName) (DCGM_FI_DEV_GPU_UTIL{{{DCGM_SEL}}})", "{{modelName}}", instant=True)], PROM), 24, 6)
    label_var = [
        {"name": "Hostname", "label": "host", "type": "query", "datasource": PROM,
         "query": {"query": "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)", "refId": "Hostname"},
         "definition": "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)", "refresh": 2, "sort": 1, "multi": True,
         "includeAll": True, "allValue": ".*", "current": {}, "hide": 0, "options": [], "regex": ""},
        {"name": "gpu", "label": "GPU", "type": "query", "datasource": PROM,
         "query": {"query": 'label_values(DCGM_FI_DEV_GPU_UTIL{Hostname=~"$Hostname"}, gpu)', "refId": "gpu"},
         "definition": 'label_values(DCGM_FI_DEV_GPU_UTIL{Hostname=~"$Hostname"}, gpu)', "refresh": 2, "sort": 3,
         "multi": True, "includeAll": True, "allValue": ".*", "current": {}, "hide": 0, "options": [], "regex": ""},
    ]
    return dashboard("fleetscope-dcgm", "fleetscope: GPUs (DCGM names)", "GPU servers and Jetson drones under "
                     "dcgm-exporter's metric and label names, from the collector's fleet exposition (Prometheus).",
                     b, [datasource_var("prometheus", "Prometheus"), *label_var], time_from="now-1h",
                     tags=("prometheus", "dcgm"))


DASHBOARDS = {
    "fleetscope-fleet.json": fleet,
    "fleetscope-device.json": device,
    "fleetscope-incidents.json": incidents,
    "fleetscope-dcgm.json": dcgm,
}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        text = render(build)
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python {Path(__file__).name}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
