"""``/metrics/fleet``: the latest reading of every device as Prometheus metrics.

GPU readings use dcgm-exporter's field names, units and labels (``DCGM_FI_DEV_GPU_UTIL``,
``DCGM_FI_DEV_FB_USED`` in MiB, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` in mJ, ...; labels
``gpu``, ``UUID``, ``device`` = ``nvidiaN``, ``modelName``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``, ``pci_bus_id``) so that dashboards and alert rules written for
dcgm-exporter work unchanged, for servers and for Jetson drones (whose integrated GPU has no
NVML UUID: it is given ``JETSON-<agent id>``). ``Hostname``, which dcgm-exporter users group
by, is the fleetscope device's name: cloned Jetson images share one OS hostname, and grouping by
it merged their GPUs into one series. The OS hostname is ``os_hostname``. Every series also
carries ``fleetscope_device`` (the device's name); its other labels are on
``fleetscope_device_info`` (join with ``group_left``). Host and Jetson readings, device state, incidents and Xids use ``fleetscope_``
names. Readings are shown only for devices heard from within the freshness window (a minute):
an exporter reports what is current.

The text is rendered directly (no per-sample objects, no string per line: parts joined once)
and cached for ``cache_s`` (one second), so a scrape of 1,000 devices costs a few indexed queries
once a second at most. A fleet whose rendering takes seconds is served its last rendering while
the next is made (``FleetExposition``), and each exposition ends with its age. Each device's label texts are kept between scrapes (``series_labels``)
until its labels or inventory change; value texts are remembered (``prom_text.NumberTexts``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat

from sqlalchemy import Engine

from fleetscope.collector import query
from fleetscope.collector.gc_pause import paused_gc
from fleetscope.collector.observability.prom_text import NumberTexts, label_set
from fleetscope.collector.observability.series_labels import SeriesLabels, gpu_identity, gpu_pairs
from fleetscope.collector.query.latest import (
    GpuReading,
    LatestDevice,
    LatestReadings,
    latest_readings,
    parallel_parts,
)

log = logging.getLogger(__name__)

MIB = float(1 << 20)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Field:
    column: str  # the stored column (gpu_latest / gpu_state / host_latest), or "" for a derived one
    name: str  # the exported metric name
    type: str  # gauge | counter
    help: str
    scale: float  # exported = stored * scale
    otel: str  # the OpenTelemetry semantic-convention name it corresponds to


# Every stored GPU column: dcgm-exporter's field where DCGM has one, else a fleetscope_ name.
GPU_FIELDS: tuple[Field, ...] = (
    Field("util_gpu_percent", "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 1.0, "hw.gpu.utilization (hw.gpu.task=general, ratio)"),
    Field("util_memory_percent", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", 1.0, "hw.gpu.memory.utilization (ratio)"),
    Field("util_encoder_percent", "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", 1.0, "hw.gpu.utilization (hw.gpu.task=encoder)"),
    Field("util_decoder_percent", "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", 1.0, "hw.gpu.utilization (hw.gpu.task=decoder)"),
    Field("memory_used_bytes", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", 1 / MIB, "hw.gpu.memory.usage (By)"),
    Field("", "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB): total minus used.", 1 / MIB, "hw.gpu.memory.limit - hw.gpu.memory.usage"),
    Field("memory_total_bytes", "DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).", 1 / MIB, "hw.gpu.memory.limit (By)"),
    Field("temp_c", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 1.0, "hw.temperature (hw.type=gpu, Cel)"),
    Field("memory_temp_c", "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", 1.0, "hw.temperature (sensor: memory)"),
    Field("power_w", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", 1.0, "hw.power (W)"),
    Field("energy_j", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", 1000.0, "hw.energy (J)"),
    Field("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 1.0, "- (no semantic convention yet)"),
    Field("memory_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", 1.0, "-"),
    Field("graphics_clock_mhz", "fleetscope_gpu_graphics_clock_hertz", "gauge", "Graphics clock frequency (in Hz).", 1e6, "-"),
    Field("pstate", "fleetscope_gpu_pstate", "gauge", "Performance state (0 = P0, fastest).", 1.0, "-"),
    Field("fan_percent", "DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", 1.0, "hw.fan.speed_ratio"),
    Field("pcie_tx_bytes_per_s", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "gauge", "PCIe transmit throughput (in KB/s), as NVML reports it.", 1 / 1024, "hw.gpu.io (direction=transmit; rate)"),
    Field("pcie_rx_bytes_per_s", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "gauge", "PCIe receive throughput (in KB/s), as NVML reports it.", 1 / 1024, "hw.gpu.io (direction=receive; rate)"),
    Field("throttle_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Clock throttle (clocks event) reasons, NVML's bitmask.", 1.0, "-"),
    Field("bar1_used_bytes", "DCGM_FI_DEV_BAR1_USED", "gauge", "BAR1 memory used (in MiB).", 1 / MIB, "-"),
    Field("bar1_total_bytes", "DCGM_FI_DEV_BAR1_TOTAL", "gauge", "BAR1 memory total (in MiB).", 1 / MIB, "-"),
    Field("power_limit_w", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", 1.0, "hw.power limit (hw.gpu: -)"),
    Field("sm_clock_max_mhz", "DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum SM clock (in MHz).", 1.0, "-"),
    Field("memory_clock_max_mhz", "DCGM_FI_DEV_MAX_MEM_CLOCK", "gauge", "Maximum memory clock (in MHz).", 1.0, "-"),
    Field("pcie_gen", "DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe link generation.", 1.0, "-"),
    Field("pcie_width", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe link width (lanes).", 1.0, "-"),
    Field("ecc_volatile_corrected", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Corrected (single-bit) volatile ECC errors.", 1.0, "hw.errors (error.type=corrected)"),
    Field("ecc_volatile_uncorrected", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Uncorrected (double-bit) volatile ECC errors.", 1.0, "hw.errors (error.type=uncorrected)"),
    Field("ecc_aggregate_corrected", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Corrected (single-bit) persistent ECC errors.", 1.0, "hw.errors"),
    Field("ecc_aggregate_uncorrected", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Uncorrected (double-bit) persistent ECC errors.", 1.0, "hw.errors"),
    Field("retired_pages", "fleetscope_gpu_retired_pages", "gauge", "Retired memory pages (single- and double-bit together).", 1.0, "-"),
    Field("remapped_rows", "fleetscope_gpu_remapped_rows", "gauge", "Remapped memory rows (correctable and uncorrectable together).", 1.0, "-"),
)

HOST_FIELDS: tuple[Field, ...] = (
    Field("cpu_percent", "fleetscope_host_cpu_utilization_ratio", "gauge", "CPU busy share, all cores (0-1).", 0.01, "system.cpu.utilization"),
    Field("load1", "fleetscope_host_load1", "gauge", "1-minute load average.", 1.0, "system.cpu.load_average.1m"),
    Field("load5", "fleetscope_host_load5", "gauge", "5-minute load average.", 1.0, "system.cpu.load_average.5m"),
    Field("load15", "fleetscope_host_load15", "gauge", "15-minute load average.", 1.0, "system.cpu.load_average.15m"),
    Field("mem_total_bytes", "fleetscope_host_memory_total_bytes", "gauge", "Memory total.", 1.0, "system.memory.limit"),
    Field("mem_used_bytes", "fleetscope_host_memory_used_bytes", "gauge", "Memory used.", 1.0, "system.memory.usage (system.memory.state=used)"),
    Field("mem_available_bytes", "fleetscope_host_memory_available_bytes", "gauge", "Memory available.", 1.0, "system.memory.usage (state=free+cached, approx.)"),
    Field("swap_total_bytes", "fleetscope_host_swap_total_bytes", "gauge", "Swap total.", 1.0, "system.paging.usage (sum of states)"),
    Field("swap_used_bytes", "fleetscope_host_swap_used_bytes", "gauge", "Swap used.", 1.0, "system.paging.usage (system.paging.state=used)"),
    Field("disk_total_bytes", "fleetscope_host_filesystem_size_bytes", "gauge", "Root filesystem size.", 1.0, "system.filesystem.limit"),
    Field("disk_used_bytes", "fleetscope_host_filesystem_used_bytes", "gauge", "Root filesystem used.", 1.0, "system.filesystem.usage (state=used)"),
    Field("disk_read_bytes", "fleetscope_host_disk_read_bytes_total", "counter", "Bytes read from disks.", 1.0, "system.disk.io (disk.io.direction=read)"),
    Field("disk_write_bytes", "fleetscope_host_disk_written_bytes_total", "counter", "Bytes written to disks.", 1.0, "system.disk.io (disk.io.direction=write)"),
    Field("net_rx_bytes", "fleetscope_host_network_receive_bytes_total", "counter", "Bytes received on network interfaces.", 1.0, "system.network.io (network.io.direction=receive)"),
    Field("net_tx_bytes", "fleetscope_host_network_transmit_bytes_total", "counter", "Bytes sent on network interfaces.", 1.0, "system.network.io (network.io.direction=transmit)"),
)

# Jetson metric points (metric_points.name) -> (exported name, type, help, scale, OTel name).
JETSON_FIELDS: dict[str, Field] = {
    "jetson.power_mw": Field("jetson.power_mw", "fleetscope_jetson_rail_power_watts", "gauge", "Power of one rail (label rail), from the INA3221 monitors.", 1e-3, "hw.power"),
    "jetson.power_avg_mw": Field("jetson.power_avg_mw", "fleetscope_jetson_rail_power_average_watts", "gauge", "tegrastats' running average power of one rail.", 1e-3, "hw.power"),
    "jetson.temp_c": Field("jetson.temp_c", "fleetscope_jetson_temperature_celsius", "gauge", "Temperature of one thermal zone (label sensor).", 1.0, "hw.temperature"),
    "jetson.fan_percent": Field("jetson.fan_percent", "fleetscope_jetson_fan_speed_ratio", "gauge", "Fan PWM duty (0-1).", 0.01, "hw.fan.speed_ratio"),
    "jetson.emc_mhz": Field("jetson.emc_mhz", "fleetscope_jetson_emc_clock_hertz", "gauge", "External memory controller clock.", 1e6, "-"),
    "jetson.emc_load_percent": Field("jetson.emc_load_percent", "fleetscope_jetson_emc_utilization_ratio", "gauge", "External memory controller load (0-1).", 0.01, "-"),
    "jetson.engine_mhz": Field("jetson.engine_mhz", "fleetscope_jetson_engine_clock_hertz", "gauge", "Clock of one engine (label engine: NVENC, NVDEC, DLA...; 0 when off).", 1e6, "-"),
    "jetson.jetson_clocks": Field("jetson.jetson_clocks", "fleetscope_jetson_clocks_enabled", "gauge", "1 when jetson_clocks pins the clocks at their maximum.", 1.0, "-"),
    "jetson.nvpmodel_id": Field("jetson.nvpmodel_id", "fleetscope_jetson_power_mode", "gauge", "The nvpmodel power mode id (label mode: its name).", 1.0, "-"),
}

class _Families:
    """The exposition's parts (bytes) family by family, HELP and TYPE once each, joined once at
    the end: a line is its family's name, a label text and a value text (``prom_text``), never a
    string of its own (1.5 million lines, 460 MB, for 10,000 devices and 45,000 GPUs)."""

    def __init__(self, numbers: NumberTexts) -> None:
        self._numbers = numbers
        self._head: dict[str, bytes] = {}
        self._parts: dict[str, list[bytes]] = {}

    def _family(self, name: str, type_: str, help_: str) -> list[bytes]:
        parts = self._parts.get(name)
        if parts is None:
            self._head[name] = f"# HELP {name} {help_}\n# TYPE {name} {type_}\n".encode()
            parts = self._parts[name] = []
        return parts

    def add(self, name: str, type_: str, help_: str, labels: bytes, value: float) -> None:
        self._family(name, type_, help_).extend((name.encode(), labels, self._numbers[value]))

    def extend(self, name: str, type_: str, help_: str, labels: Sequence[bytes], values: Sequence[float | None]) -> None:
        """A line for each label text whose value is not None (the hot path: every GPU's field)."""
        present: Sequence[float] = values  # type: ignore[assignment]  # once the Nones are out
        if None in values:
            keep = [v is not None for v in values]
            labels, present = list(compress(labels, keep)), list(compress(values, keep))  # type: ignore[arg-type]
        if not present:
            return
        parts = self._family(name, type_, help_)
        # name, labels, value, name, labels, value...: C-level iteration, no line string made.
        parts.extend(chain.from_iterable(zip(repeat(name.encode()), labels, map(self._numbers.__getitem__, present))))

    def chunks(self) -> list[bytes]:
        """The exposition as one chunk per family, in order (a client reads them one after the
        other: joining 460 MB into one buffer cost more than writing the chunks)."""
        return [b"".join(chain((self._head[name],), parts)) for name, parts in self._parts.items()]


def _scaled(values: list[float | None], scale: float) -> list[float | None]:
    return values if scale == 1.0 else [None if x is None else x * scale for x in values]


def _gpu_values(fld: Field, gpus: Sequence[GpuReading], devs: Sequence[LatestDevice]) -> list[float | None]:
    """One GPU field's stored values (scaled) in the order of ``gpus``; ``devs``: each one's device."""
    if fld.column == "memory_total_bytes":  # the newest state's, else the inventory's
        values = [g.values.get(fld.column) for g in gpus]
        values = [_inventory_total(d, g.gpu_index) if x is None else x for x, g, d in zip(values, gpus, devs)]
    elif fld.column:
        column = fld.column
        values = [g.values.get(column) for g in gpus]
    else:  # FB_FREE: total minus used
        values = []
        for g, d in zip(gpus, devs):
            total = g.values.get("memory_total_bytes") or _inventory_total(d, g.gpu_index)
            used_b = g.values.get("memory_used_bytes")
            values.append(max(0.0, total - used_b) if total is not None and used_b is not None else None)
    return _scaled(values, fld.scale)


def render_fleet(readings: LatestReadings) -> str:
    """The Prometheus text exposition (format 0.0.4) of ``readings``."""
    return render_fleet_bytes(readings, SeriesLabels(), NumberTexts()).decode()


def render_fleet_bytes(readings: LatestReadings, series_labels: SeriesLabels, numbers: NumberTexts) -> bytes:
    """``render_fleet``, encoded, with label texts kept in ``series_labels`` and value texts in
    ``numbers`` from one rendering to the next."""
    return b"".join(render_fleet_chunks(readings, series_labels, numbers))


def render_fleet_chunks(readings: LatestReadings, series_labels: SeriesLabels, numbers: NumberTexts) -> list[bytes]:
    """``render_fleet_bytes`` as one chunk per metric family, to be written one after the other."""
    f = _Families(numbers)
    texts = series_labels.of(readings.devices)
    # Series of one device name (two installs of a name: the last one's labels, as before).
    devs = {d.name: d for d in readings.devices}
    texts_of = {d.name: t for d, t in zip(readings.devices, texts)}
    for t in texts:
        f.add("fleetscope_device_info", "gauge", "One series per device, value 1: its kind and labels (label_<key>), to join with group_left.", t.info, 1)
    for d, t in zip(readings.devices, texts):
        lab = t.host
        f.add("fleetscope_device_up", "gauge", "1 while the device is online: heard from within its offline threshold "
              "(3 of its batch intervals, at least 10 s, or the collector's --offline-after).", lab, 1 if d.online else 0)
        f.add("fleetscope_device_stopped", "gauge", "1 when the device's agent said it stopped cleanly (not an outage).",
              lab, 1 if d.state == query.STATE_STOPPED else 0)
        f.add("fleetscope_device_last_seen_timestamp_seconds", "gauge", "When the collector last received data from the device (Unix time).", lab, d.last_seen_ns / 1e9)
        f.add("fleetscope_device_clock_skew_seconds", "gauge", "The device clock minus the collector's, as measured at registration and per batch.", lab, d.clock_skew_ns / 1e9)
        c = d.counters
        if c:
            f.add("fleetscope_device_agent_spool_batches", "gauge", "Batches in the agent's spool, as it last reported.", lab, float(c.get("spool_batches", 0) or 0))
            f.add("fleetscope_device_agent_spool_bytes", "gauge", "Bytes in the agent's spool, as it last reported.", lab, float(c.get("spool_bytes", 0) or 0))
            f.add("fleetscope_device_agent_dropped_batches_total", "counter", "Batches the agent dropped unsent, as it last reported.", lab, float(c.get("dropped_batches", 0) or 0))
    gpus = readings.gpus
    gpu_devs = [devs[g.device] for g in gpus]
    gpu_labels = [texts_of[g.device].gpu(g.gpu_index) for g in gpus]
    for fld in GPU_FIELDS:
        f.extend(fld.name, fld.type, fld.help, gpu_labels, _gpu_values(fld, gpus, gpu_devs))
    last_xid: dict[tuple[str, int | None], tuple[int, int]] = {}
    for xt in readings.xids:
        at = (xt.device, xt.gpu_index)
        if at not in last_xid or xt.last_seen_ns > last_xid[at][0]:
            last_xid[at] = (xt.last_seen_ns, xt.xid)
    for (device, gi), (_ts, xid) in sorted(last_xid.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        if gi is not None:
            f.add("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", texts_of[device].gpu(gi), xid)
    for xt in readings.xids:
        pairs = gpu_pairs(devs[xt.device], xt.gpu_index) if xt.gpu_index is not None else [("fleetscope_device", xt.device)]
        f.add("fleetscope_gpu_xid_errors_total", "counter", "Xid errors reported, by Xid code (kernel log and NVML events, merged).", label_set([*pairs, ("xid", str(xt.xid))]), xt.occurrences)
    host_labels = [texts_of[h.device].host_kind for h in readings.hosts]
    for fld in HOST_FIELDS:
        column = fld.column
        f.extend(fld.name, fld.type, fld.help, host_labels, _scaled([h.values.get(column) for h in readings.hosts], fld.scale))
    for p in readings.points:
        jf = JETSON_FIELDS.get(p.name)
        if jf is not None:
            f.add(jf.name, jf.type, jf.help, texts_of[p.device].point(p.labels), p.value * jf.scale)
    for tally in readings.incidents:
        lab = label_set([("fleetscope_device", tally.device), ("kind", tally.kind), ("severity", tally.severity)])
        f.add("fleetscope_incidents_total", "counter", "Incident reports (every occurrence folded into an incident), by device, kind and severity.", lab, tally.occurrences)
    for tally in readings.incidents:
        lab = label_set([("fleetscope_device", tally.device), ("kind", tally.kind), ("severity", tally.severity)])
        f.add("fleetscope_incidents_open", "gauge", "Incidents not resolved, by device, kind and severity.", lab, tally.open)
    return f.chunks()


def _inventory_total(dev: LatestDevice, gpu_index: int) -> float | None:
    ident = gpu_identity(dev, gpu_index)
    return float(ident.memory_total_bytes) if ident is not None and ident.memory_total_bytes else None


AGE_FAMILY = "fleetscope_fleet_exposition_age_seconds"
AGE_HEAD = (f"# HELP {AGE_FAMILY} Seconds since this exposition's readings were read from the database (a fleet whose "
            f"rendering takes longer than a few seconds is served its last rendering while the next is made).\n"
            f"# TYPE {AGE_FAMILY} gauge\n").encode()


# Seconds a background rendering waits after a scrape was served, for its body to be written first.
WRITE_FIRST_S = 1.0


@dataclass(frozen=True)
class _Rendering:
    at: float  # time.monotonic() when its readings were read
    took_s: float
    chunks: list[bytes]


class FleetExposition:
    """``/metrics/fleet``: renders through the query API at most once per ``cache_s``; concurrent
    scrapes share one rendering.

    A fleet whose rendering takes ``stale_after_s`` or longer (10,000 devices: several seconds,
    against Prometheus' default scrape timeout of 10 s) is served its last rendering at once, up
    to ``max_age_s`` old, while the next one is made in the background, timed to be done just
    before the next scrape is due: dcgm-exporter's model (it serves what it collected last, every
    ``--collect-interval``), so a scrape's time no longer grows with the fleet. Every exposition ends with its age (``AGE_FAMILY``); a small fleet's is
    rendered for each scrape, as before, and is 0."""

    def __init__(self, engine: Engine, *, cache_s: float = 1.0, clock: Callable[[], int] = time.time_ns,
                 observe: Callable[[float], None] | None = None, stale_after_s: float = 2.0,
                 max_age_s: float = 120.0) -> None:
        self._engine = engine
        self._cache_s = cache_s
        self._stale_after_s = stale_after_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._observe = observe
        self._lock = threading.Lock()  # the fields below
        self._render_lock = threading.Lock()  # one rendering at a time
        self._cached: _Rendering | None = None
        self._background: threading.Thread | None = None
        self._last_scrape_at: float | None = None  # of a scrape served the last rendering
        # Kept between scrapes (used under the render lock): label texts change only with a
        # device's labels or inventory, and most values repeat.
        self._series_labels = SeriesLabels()
        self._numbers = NumberTexts()

    def render(self) -> bytes:
        return b"".join(self.render_chunks())

    def render_chunks(self) -> list[bytes]:
        """The exposition as chunks to write in order (what ``/metrics/fleet`` serves)."""
        with self._lock:
            cached = self._cached
            if cached is not None:
                now = time.monotonic()
                age = now - cached.at
                if age < self._cache_s:
                    return self._served(cached)
                if cached.took_s >= self._stale_after_s and age < self._max_age_s:
                    self._refresh_ahead(now, cached.took_s)
                    return self._served(cached)
        return self._served(self._render_fresh())

    def wait_for_refresh(self, timeout_s: float | None = None) -> None:
        """Until a background rendering planned or in progress is done (tests, an orderly stop)."""
        background = self._background
        if background is not None:
            background.join(timeout_s)

    @staticmethod
    def _served(rendering: _Rendering) -> list[bytes]:
        age = max(0.0, time.monotonic() - rendering.at)
        return [*rendering.chunks, AGE_HEAD + f"{AGE_FAMILY} {age:.3f}\n".encode()]

    def _refresh_ahead(self, now: float, took_s: float) -> None:
        """Plan the next rendering to be done just before the next scrape is due (called under
        ``_lock``): its readings are then as fresh as a rendering's length allows, and it does
        not start while the body just served is written (one process: they would share the
        interpreter). The next scrape is expected one interval (the last two scrapes') away;
        without one, the rendering starts once the body is out."""
        previous, self._last_scrape_at = self._last_scrape_at, now
        if self._background is not None and self._background.is_alive():
            return  # planned or under way already
        delay = WRITE_FIRST_S
        if previous is not None:
            delay = max(WRITE_FIRST_S, (now - previous) - took_s * 1.25 - 1.0)

        def refresh() -> None:
            time.sleep(delay)
            try:
                self._render_fresh()
            except Exception as exc:  # the database is away: scrapes get the last rendering until max_age_s
                log.warning("/metrics/fleet: the next rendering failed, the last one is served meanwhile: %s", exc)

        self._background = threading.Thread(target=refresh, name="fleetscope-fleet-exposition", daemon=True)
        self._background.start()

    def _render_fresh(self) -> _Rendering:
        with self._render_lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached.at < self._cache_s:
                return cached  # made while this one waited for the lock
            started = time.monotonic()
            with query.session_scope(self._engine) as session:
                if self._engine.dialect.name == "postgresql":  # the reads at once (see latest_readings)
                    with parallel_parts(self._engine) as run_apart:
                        readings = latest_readings(session=session, now_ns=self._clock(), run_apart=run_apart)
                else:
                    readings = latest_readings(session=session, now_ns=self._clock())
            with paused_gc():  # millions of line parts: a large, acyclic build (see gc_pause)
                body = render_fleet_chunks(readings, self._series_labels, self._numbers)
            took = time.monotonic() - started
            if self._observe is not None:
                self._observe(took)
            rendering = _Rendering(at=started, took_s=took, chunks=body)
            with self._lock:
                self._cached = rendering
            return rendering


__all__ = ["AGE_FAMILY", "CONTENT_TYPE", "GPU_FIELDS", "HOST_FIELDS", "JETSON_FIELDS", "Field", "FleetExposition", "render_fleet",
           "render_fleet_bytes", "render_fleet_chunks"]
