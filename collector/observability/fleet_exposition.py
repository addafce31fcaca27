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

The text is rendered directly (no per-sample objects) and cached for ``cache_s`` (one second),
so a scrape of 1,000 devices costs a few indexed queries once a second at most.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from fleetscope.collector import query
from fleetscope.collector.query.latest import LatestDevice, LatestReadings, latest_readings

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

_LABEL_KEY = re.compile(r"[^a-zA-Z0-9_]")


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs) + "}"


def _num(v: float) -> str:
    if -1e15 < v < 1e15:  # finite and not NaN (every comparison with NaN is false): the common case
        i = int(v)
        return str(i) if v == i else repr(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


class _Families:
    """Samples grouped by metric name, written family by family with HELP and TYPE once."""

    def __init__(self) -> None:
        self._meta: dict[str, tuple[str, str]] = {}
        self._lines: dict[str, list[str]] = {}

    def add(self, name: str, type_: str, help_: str, labels: str, value: float) -> None:
        lines = self._lines.get(name)
        if lines is None:
            self._meta[name] = (type_, help_)
            lines = self._lines[name] = []
        lines.append(f"{name}{labels} {_num(value)}")

    def lines(self, name: str, type_: str, help_: str) -> list[str]:
        """The family's list of lines, to append ``name{labels} value`` lines to directly (the
        hot loop over every GPU's fields: 1.5 million lines for 45,000 GPUs)."""
        lines = self._lines.get(name)
        if lines is None:
            self._meta[name] = (type_, help_)
            lines = self._lines[name] = []
        return lines

    def text(self) -> str:
        out: list[str] = []
        for name, lines in self._lines.items():
            type_, help_ = self._meta[name]
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {type_}")
            out.extend(lines)
        if out:
            out.append("")  # the final newline, joined in (not a copy of the whole text)
        return "\n".join(out)


def _host_labels(dev: LatestDevice) -> list[tuple[str, str]]:
    """Which device a series is about: the device's name as ``fleetscope_device`` and as
    dcgm-exporter's ``Hostname`` (unique where OS hostnames are not), the OS hostname apart."""
    return [("fleetscope_device", dev.name), ("Hostname", dev.name), ("os_hostname", dev.hostname)]


def _gpu_labels(dev: LatestDevice, gpu_index: int) -> list[tuple[str, str]]:
    ident = next((g for g in dev.gpus if g.index == gpu_index), None)
    uuid = ident.uuid if ident is not None and ident.uuid else ""
    if not uuid and dev.kind == "jetson":
        uuid = f"JETSON-{dev.agent_id}"
    return [
        ("gpu", str(gpu_index)),
        ("UUID", uuid),
        ("device", f"nvidia{gpu_index}"),
        ("modelName", ident.name if ident is not None else ""),
        *_host_labels(dev)[1:],
        ("DCGM_FI_DRIVER_VERSION", dev.driver_version),
        ("pci_bus_id", ident.pci_bus_id if ident is not None else ""),
        ("fleetscope_device", dev.name),
    ]


def render_fleet(readings: LatestReadings) -> str:
    """The Prometheus text exposition (format 0.0.4) of ``readings``."""
    f = _Families()
    devs = {d.name: d for d in readings.devices}
    for d in readings.devices:
        base = _host_labels(d)
        info = [*base, ("agent_id", d.agent_id), ("kind", d.kind)]
        taken = {k for k, _ in info}
        for k, lv in sorted(d.labels.items()):
            key = "label_" + _LABEL_KEY.sub("_", k)
            if key not in taken:
                taken.add(key)
                info.append((key, str(lv)))
        f.add("fleetscope_device_info", "gauge", "One series per device, value 1: its kind and labels (label_<key>), to join with group_left.", _labels(info), 1)
    for d in readings.devices:
        lab = _labels(_host_labels(d))
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
    families: dict[str, list[str]] = {}
    for g in readings.gpus:
        dev = devs[g.device]
        lab = _labels(_gpu_labels(dev, g.gpu_index))
        vals = g.values
        for fld in GPU_FIELDS:
            if fld.column:
                x = vals.get(fld.column)
                if x is None and fld.column == "memory_total_bytes":
                    x = _inventory_total(dev, g.gpu_index)
            else:  # FB_FREE
                total = vals.get("memory_total_bytes") or _inventory_total(dev, g.gpu_index)
                used_b = vals.get("memory_used_bytes")
                x = max(0.0, total - used_b) if total is not None and used_b is not None else None
            if x is not None:
                lines = families.get(fld.name)
                if lines is None:
                    lines = families[fld.name] = f.lines(fld.name, fld.type, fld.help)
                lines.append(f"{fld.name}{lab} {_num(x * fld.scale)}")
    last_xid: dict[tuple[str, int | None], tuple[int, int]] = {}
    for xt in readings.xids:
        at = (xt.device, xt.gpu_index)
        if at not in last_xid or xt.last_seen_ns > last_xid[at][0]:
            last_xid[at] = (xt.last_seen_ns, xt.xid)
    for (device, gi), (_ts, xid) in sorted(last_xid.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        if gi is not None:
            f.add("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", _labels(_gpu_labels(devs[device], gi)), xid)
    for xt in readings.xids:
        pairs = _gpu_labels(devs[xt.device], xt.gpu_index) if xt.gpu_index is not None else [("fleetscope_device", xt.device)]
        f.add("fleetscope_gpu_xid_errors_total", "counter", "Xid errors reported, by Xid code (kernel log and NVML events, merged).", _labels([*pairs, ("xid", str(xt.xid))]), xt.occurrences)
    for h in readings.hosts:
        dev = devs[h.device]
        lab = _labels([*_host_labels(dev), ("kind", dev.kind)])
        for fld in HOST_FIELDS:
            x = h.values.get(fld.column)
            if x is not None:
                f.add(fld.name, fld.type, fld.help, lab, x * fld.scale)
    for p in readings.points:
        jf = JETSON_FIELDS.get(p.name)
        if jf is None:
            continue
        dev = devs[p.device]
        host = _host_labels(dev)
        taken = {k for k, _ in host}
        extra = sorted((_LABEL_KEY.sub("_", k), v) for k, v in p.labels.items() if _LABEL_KEY.sub("_", k) not in taken)
        f.add(jf.name, jf.type, jf.help, _labels([*host, *extra]), p.value * jf.scale)
    for t in readings.incidents:
        lab = _labels([("fleetscope_device", t.device), ("kind", t.kind), ("severity", t.severity)])
        f.add("fleetscope_incidents_total", "counter", "Incident reports (every occurrence folded into an incident), by device, kind and severity.", lab, t.occurrences)
    for t in readings.incidents:
        lab = _labels([("fleetscope_device", t.device), ("kind", t.kind), ("severity", t.severity)])
        f.add("fleetscope_incidents_open", "gauge", "Incidents not resolved, by device, kind and severity.", lab, t.open)
    return f.text()


def _inventory_total(dev: LatestDevice, gpu_index: int) -> float | None:
    ident = next((g for g in dev.gpus if g.index == gpu_index), None)
    return float(ident.memory_total_bytes) if ident is not None and ident.memory_total_bytes else None


class FleetExposition:
    """``/metrics/fleet``: renders through the query API at most once per ``cache_s``; concurrent
    scrapes share one rendering."""

    def __init__(self, engine: Engine, *, cache_s: float = 1.0, clock: Callable[[], int] = time.time_ns,
                 observe: Callable[[float], None] | None = None) -> None:
        self._engine = engine
        self._cache_s = cache_s
        self._clock = clock
        self._observe = observe
        self._lock = threading.Lock()
        self._cached: tuple[float, bytes] | None = None

    def render(self) -> bytes:
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self._cache_s:
                return self._cached[1]
            started = time.monotonic()
            with query.session_scope(self._engine) as session:
                readings = latest_readings(session=session, now_ns=self._clock())
            body = render_fleet(readings).encode()
            if self._observe is not None:
                self._observe(time.monotonic() - started)
            self._cached = (time.monotonic(), body)
            return body


__all__ = ["CONTENT_TYPE", "GPU_FIELDS", "HOST_FIELDS", "JETSON_FIELDS", "Field", "FleetExposition", "render_fleet"]
