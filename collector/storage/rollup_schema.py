"""Rollup tables: per-minute, per-hour and per-day aggregates of the raw time series.

A week of 1 s samples from a real fleet is hundreds of millions of rows; no chart reads that.
These tables hold one row per (device, GPU, bucket) with what charts and comparisons need:
averages weighted by ``n`` (the number of raw samples), extremes, and deltas of cumulative
counters (energy, disk and network bytes) with the time ``span_ns`` they cover, so a rate is
``delta / span`` at any resolution. ``step_s`` (60, 3600 or 86400) tells the resolution; all live
in one table per source so a reader switches resolution by a value, not a table name.

``rollup_progress`` says, per device and step, up to where buckets are final: every bucket
starting before ``rolled_until_ns`` is in the table. Readers take the rest from the finer
source (minute rollups, then raw samples), so a chart always reaches "now".

Any number of collectors run the rollup job; the ``rollup`` lease in ``leases`` (see
``fleetscope.collector.storage.lease``) makes one of them roll at a time.

The tables are defined on the collector's ``metadata``, and created and changed by the
migrations (``fleetscope.collector.storage.migrations``) like every other table.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, Integer, SmallInteger, String, Table, Text

from fleetscope.collector.storage.schema import metadata

STEPS_S = (60, 3600, 86400)  # the stored resolutions: minute, hour and day (UTC midnights)
# Each step is made from the one before it (minute rows from raw samples, hour rows from minute
# rows, day rows from hour rows); a reader uses a step only where its buckets nest.
SOURCE_STEP_S = {60: 0, 3600: 60, 86400: 3600}

# Rollup value columns per source, in a fixed order. The names say how each was aggregated:
# *_avg (weighted by n), *_max, *_min, *_delta (last minus first of a cumulative counter),
# *_n (count of samples where a condition held).
GPU_ROLLUP_COLUMNS = (
    "util_avg",
    "util_max",
    "mem_util_avg",
    "memory_used_avg",
    "memory_used_max",
    "temp_avg",
    "temp_max",
    "power_avg",
    "power_max",
    "energy_delta_j",
    "sm_clock_avg",
    "sm_clock_min",
    "memory_clock_avg",
    "fan_avg",
    "throttle_thermal_n",
    "throttle_power_n",
)

HOST_ROLLUP_COLUMNS = (
    "cpu_avg",
    "cpu_max",
    "load1_avg",
    "mem_used_avg",
    "mem_used_max",
    "mem_total_max",
    "swap_used_avg",
    "swap_used_max",
    "swap_total_max",
    "disk_read_delta",
    "disk_write_delta",
    "net_rx_delta",
    "net_tx_delta",
)

gpu_rollups = Table(
    "gpu_rollups",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("step_s", Integer, nullable=False),
    Column("bucket_ns", BigInteger, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    Column("n", BigInteger, nullable=False),
    Column("span_ns", BigInteger, nullable=False),
    *[Column(name, Float) for name in GPU_ROLLUP_COLUMNS],
    Index("gpu_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
)

host_rollups = Table(
    "host_rollups",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("step_s", Integer, nullable=False),
    Column("bucket_ns", BigInteger, nullable=False),
    Column("n", BigInteger, nullable=False),
    Column("span_ns", BigInteger, nullable=False),
    *[Column(name, Float) for name in HOST_ROLLUP_COLUMNS],
    Index("host_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
)

# Merged latency histograms per (device, operation, labels, bucket). ``window_ns`` is the sum of
# the source histograms' own windows: the time the operation was being measured, which is what
# throughput divides by (a model that served for ten minutes of an hour did not serve slowly).
latency_rollups = Table(
    "latency_rollups",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("step_s", Integer, nullable=False),
    Column("bucket_ns", BigInteger, nullable=False),
    Column("name", String(200), nullable=False),
    Column("labels", Text, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("sum_ns", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("zero_count", BigInteger, nullable=False),
    Column("window_ns", BigInteger, nullable=False),
    Column("buckets", Text, nullable=False),  # JSON {index: count}, as in latency_histograms
    # One row per scheme: histograms of different schemes are never merged (0 = legacy).
    Column("scheme", SmallInteger, nullable=False, server_default="0"),
    Index("latency_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
)

rollup_progress = Table(
    "rollup_progress",
    metadata,
    Column("device_id", Integer, primary_key=True, autoincrement=False),
    Column("step_s", Integer, primary_key=True, autoincrement=False),
    Column("rolled_until_ns", BigInteger, nullable=False),
)
