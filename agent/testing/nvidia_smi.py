"""Reading what ``nvidia-smi`` prints, in all three of its output styles, into frozen records.

Used to check the agent's NVML readings against nvidia-smi on the same host, and to turn
captured outputs into replay recordings for a fake NVML. The styles:

* ``nvidia-smi -q -x``: XML (schema v10 with driver 418 up to v13 with drivers 590/595). Tag
  names moved over the years (``clocks_throttle_reasons`` became ``clocks_event_reasons``,
  ``power_readings`` became ``gpu_power_readings``, ``power_draw`` split into
  ``instant_power_draw``/``average_power_draw``, ECC counters went from single/double bit to
  SRAM/DRAM), so every field lists each place it has lived.
* ``nvidia-smi -q``: the same tree as indented ``Key : value`` text.
* ``nvidia-smi``: the default table, both the pre-530 narrow layout and the wider 530+ one,
  with its process table or "No running processes found".

Units live in the field names and sizes are integer bytes (MiB as nvidia-smi means it, 2**20).
``None`` means the tool printed N/A, [N/A], "Not Supported", ERR! or nothing; a value printed as
ERR! or "Unknown Error" is also named in ``NvidiaSmiGpu.err_fields`` so a broken sensor can be
told apart from an absent one.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.records import THROTTLE_REASON_BITS, GpuSample, ProcessUsage

__all__ = [
    "NvidiaSmiFailedError",
    "NvidiaSmiGpu",
    "NvidiaSmiMigDevice",
    "NvidiaSmiParseError",
    "NvidiaSmiProcess",
    "NvidiaSmiReport",
    "parse_nvidia_smi",
]


class NvidiaSmiParseError(ValueError):
    """The text is not nvidia-smi output this parser can read (or is cut off mid-way)."""


class NvidiaSmiFailedError(NvidiaSmiParseError):
    """nvidia-smi ran but reported that it could not query the GPUs (driver not loaded, ...)."""


@dataclass(frozen=True)
class NvidiaSmiProcess:
    """One row of the process list (table) or one ``process_info`` / ``Process ID`` entry."""

    gpu_index: int | None
    gpu_bus_id: str | None
    pid: int | None
    type: str | None  # "C" compute, "G" graphics, "C+G", "M" (MPS) ...
    name: str | None
    used_memory_bytes: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class NvidiaSmiMigDevice:
    """A MIG instance as listed under ``mig_devices`` in the XML."""

    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    sm_count: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    memory_reserved_bytes: int | None
    bar1_total_bytes: int | None
    bar1_used_bytes: int | None


@dataclass(frozen=True)
class NvidiaSmiGpu:
    """Everything one style or another prints about one GPU. Field names follow ``GpuSample``."""

    index: int | None  # the table prints it; for -q/-x it is the position (nvidia-smi lists by index)
    name: str | None
    name_truncated: bool = False  # the table cuts long names to "NVIDIA GeForce ..."
    uuid: str | None = None
    serial: str | None = None
    bus_id: str | None = None  # as printed: "00000000:01:00.0"
    product_brand: str | None = None
    product_architecture: str | None = None
    vbios_version: str | None = None
    minor_number: int | None = None
    persistence_mode: bool | None = None
    display_mode: bool | None = None
    display_active: bool | None = None
    driver_model: str | None = None  # Windows: "WDDM"/"TCC"
    fan_percent: float | None = None
    temp_c: float | None = None
    memory_temp_c: float | None = None
    temp_tlimit_c: float | None = None  # headroom to the slowdown limit (535+ "GPU T.Limit Temp")
    temp_shutdown_c: float | None = None
    temp_slowdown_c: float | None = None
    temp_max_operating_c: float | None = None
    temp_max_memory_operating_c: float | None = None
    temp_target_c: float | None = None
    # 550+ print the thresholds relative to T.Limit instead of absolute (often negative).
    temp_shutdown_tlimit_c: float | None = None
    temp_slowdown_tlimit_c: float | None = None
    temp_max_operating_tlimit_c: float | None = None
    temp_max_memory_operating_tlimit_c: float | None = None
    pstate: int | None = None  # P8 -> 8
    power_w: float | None = None  # instantaneous draw (older drivers print one "Power Draw")
    power_average_w: float | None = None
    power_limit_w: float | None = None  # the enforced / current limit ("Pwr:Usage/Cap" cap)
    power_limit_requested_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    bar1_total_bytes: int | None = None
    bar1_used_bytes: int | None = None
    bar1_free_bytes: int | None = None
    util_gpu_percent: float | None = None
    util_memory_percent: float | None = None
    util_encoder_percent: float | None = None
    util_decoder_percent: float | None = None
    util_jpeg_percent: float | None = None
    util_ofa_percent: float | None = None
    graphics_clock_mhz: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    video_clock_mhz: float | None = None
    graphics_clock_max_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    video_clock_max_mhz: float | None = None
    graphics_clock_app_mhz: float | None = None
    memory_clock_app_mhz: float | None = None
    graphics_clock_default_app_mhz: float | None = None
    memory_clock_default_app_mhz: float | None = None
    graphics_clock_boost_max_mhz: float | None = None
    voltage_graphics_mv: float | None = None
    # Active clock-event ("throttle") reasons, names as in records.THROTTLE_REASON_BITS, and the mask.
    throttle_reasons_active: tuple[str, ...] | None = None
    throttle_reasons: int | None = None
    ecc_mode_enabled: bool | None = None
    ecc_mode_pending_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_volatile_sram_corrected: int | None = None
    ecc_volatile_sram_uncorrected: int | None = None
    ecc_volatile_dram_corrected: int | None = None
    ecc_volatile_dram_uncorrected: int | None = None
    ecc_aggregate_sram_corrected: int | None = None
    ecc_aggregate_sram_uncorrected: int | None = None
    ecc_aggregate_dram_corrected: int | None = None
    ecc_aggregate_dram_uncorrected: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    compute_mode: str | None = None  # NVML spelling: Default, Exclusive_Thread, Exclusive_Process, Prohibited
    mig_mode_enabled: bool | None = None
    mig_mode_pending_enabled: bool | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_count: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    mig_devices: tuple[NvidiaSmiMigDevice, ...] = ()
    err_fields: tuple[str, ...] = ()  # fields printed as ERR! / Unknown Error

    @property
    def retired_pages(self) -> int | None:
        if self.retired_pages_single_bit is None and self.retired_pages_double_bit is None:
            return None
        return (self.retired_pages_single_bit or 0) + (self.retired_pages_double_bit or 0)

    @property
    def remapped_rows(self) -> int | None:
        if self.remapped_rows_correctable is None and self.remapped_rows_uncorrectable is None:
            return None
        return (self.remapped_rows_correctable or 0) + (self.remapped_rows_uncorrectable or 0)

    def to_gpu_sample(self, ts_ns: int, processes: Sequence[NvidiaSmiProcess] = ()) -> GpuSample:
        """The reading as the NVML sampler would have produced it (for replay recordings)."""
        procs = tuple(
            ProcessUsage(
                pid=p.pid,
                name=p.name or "",
                cpu_percent=None,
                rss_bytes=None,
                gpu_memory_bytes=p.used_memory_bytes,
            )
            for p in processes
            if p.pid is not None
        )
        return GpuSample(
            ts_ns=ts_ns,
            gpu_index=self.index if self.index is not None else 0,
            util_gpu_percent=self.util_gpu_percent,
            util_memory_percent=self.util_memory_percent,
            util_encoder_percent=self.util_encoder_percent,
            util_decoder_percent=self.util_decoder_percent,
            memory_used_bytes=self.memory_used_bytes,
            memory_free_bytes=self.memory_free_bytes,
            memory_total_bytes=self.memory_total_bytes,
            bar1_used_bytes=self.bar1_used_bytes,
            bar1_total_bytes=self.bar1_total_bytes,
            temp_c=self.temp_c,
            memory_temp_c=self.memory_temp_c,
            power_w=self.power_w,
            power_limit_w=self.power_limit_w,
            sm_clock_mhz=self.sm_clock_mhz,
            memory_clock_mhz=self.memory_clock_mhz,
            graphics_clock_mhz=self.graphics_clock_mhz,
            sm_clock_max_mhz=self.sm_clock_max_mhz,
            memory_clock_max_mhz=self.memory_clock_max_mhz,
            pstate=self.pstate,
            fan_percent=self.fan_percent,
            pcie_gen=self.pcie_gen,
            pcie_width=self.pcie_width,
            pcie_tx_bytes_per_s=self.pcie_tx_bytes_per_s,
            pcie_rx_bytes_per_s=self.pcie_rx_bytes_per_s,
            throttle_reasons=self.throttle_reasons,
            ecc_volatile_corrected=self.ecc_volatile_corrected,
            ecc_volatile_uncorrected=self.ecc_volatile_uncorrected,
            ecc_aggregate_corrected=self.ecc_aggregate_corrected,
            ecc_aggregate_uncorrected=self.ecc_aggregate_uncorrected,
            retired_pages=self.retired_pages,
            remapped_rows=self.remapped_rows,
            processes=procs,
        )


@dataclass(frozen=True)
class NvidiaSmiReport:
    style: str  # "xml", "query" (-q text) or "table"
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[NvidiaSmiGpu, ...]
    processes: tuple[NvidiaSmiProcess, ...]
    processes_reported: bool  # False when the output had no process section at all
    timestamp: str | None = None  # as printed, local time of the host: "Mon Jan 20 10:18:26 2025"
    nvidia_smi_version: str | None = None  # the table header's "NVIDIA-SMI x"
    attached_gpus: int | None = None  # may exceed len(gpus) when the output was filtered (-i)

    def processes_of(self, gpu: NvidiaSmiGpu) -> tuple[NvidiaSmiProcess, ...]:
        return tuple(
            p
            for p in self.processes
            if (p.gpu_bus_id is not None and p.gpu_bus_id == gpu.bus_id)
            or (p.gpu_bus_id is None and p.gpu_index is not None and p.gpu_index == gpu.index)
        )


# --------------------------------------------------------------------------- value parsing

_NA_WORDS = frozenset(
    {"", "n/a", "not supported", "not available", "none", "unknown", "[n/a]", "[not supported]", "-"}
)
_ERR_WORDS = ("err!", "unknown error", "[unknown error]", "gpu is lost", "[gpu is lost]")
_NUM = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/()!]*)\s*$")


class _Values:
    """Turns printed values into numbers, remembering which fields were printed as errors."""

    def __init__(self) -> None:
        self.err_fields: list[str] = []

    def _clean(self, field: str, raw: str | None) -> str | None:
        if raw is None:
            return None
        s = raw.strip()
        low = s.lower()
        if low in _NA_WORDS or low.startswith("requested functionality has been deprecated"):
            return None
        if low in _ERR_WORDS:
            self.err_fields.append(field)
            return None
        if low.startswith("[") and low.endswith(
            "]"
        ):  # "[N/A]", "[Not Supported]", "[Insufficient Permissions]"
            return None
        return s

    def number(self, field: str, raw: str | None, units: tuple[str, ...] = ()) -> float | None:
        s = self._clean(field, raw)
        if s is None:
            return None
        m = _NUM.match(s)
        if not m or (units and m.group(2) and m.group(2).lower() not in units):
            return None  # an unexpected shape: not a number we would trust in a comparison
        return float(m.group(1))

    def integer(self, field: str, raw: str | None) -> int | None:
        s = self._clean(field, raw)
        if s is None:
            return None
        m = _NUM.match(s)
        if not m:
            return None
        try:
            return int(m.group(1))
        except ValueError:
            return int(float(m.group(1)))

    def size(self, field: str, raw: str | None) -> int | None:
        s = self._clean(field, raw)
        if s is None:
            return None
        try:
            return parse_size(s)  # nvidia-smi's MiB/KiB are powers of two, as parse_size reads them
        except ValueError:
            return None

    def rate(self, field: str, raw: str | None) -> float | None:
        s = self._clean(field, raw)
        if s is None or not s.endswith("/s"):
            return None
        try:
            return float(parse_size(s[:-2]))
        except ValueError:
            return None

    def flag(self, field: str, raw: str | None) -> bool | None:
        s = self._clean(field, raw)
        if s is None:
            return None
        low = s.lower()
        if low in ("enabled", "on", "yes", "active", "true", "1"):
            return True
        if low in ("disabled", "off", "no", "not active", "false", "0"):
            return False
        return None

    def text(self, field: str, raw: str | None) -> str | None:
        s = self._clean(field, raw)
        return s if s else None


_PSTATE = re.compile(r"^P(\d{1,2})$")


def _pstate(raw: str | None) -> int | None:
    m = _PSTATE.match(raw.strip()) if raw else None
    return int(m.group(1)) if m else None


_COMPUTE_MODES = {
    "default": "Default",
    "exclusive_thread": "Exclusive_Thread",
    "exclusive thread": "Exclusive_Thread",
    "e. thread": "Exclusive_Thread",
    "exclusive_process": "Exclusive_Process",
    "exclusive process": "Exclusive_Process",
    "e. process": "Exclusive_Process",
    "prohibited": "Prohibited",
}


def _compute_mode(values: _Values, raw: str | None) -> str | None:
    s = values.text("compute_mode", raw)
    if s is None:
        return None
    return _COMPUTE_MODES.get(s.lower(), s)  # an unknown spelling stays as printed


def _reason_name(label: str) -> str:
    """Any spelling of a clock-event reason -> its key in THROTTLE_REASON_BITS."""
    s = label.strip().lower().replace(" ", "_")
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_"):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    return {
        "idle": "gpu_idle",
        "display_clocks_setting": "display_clock_setting",
        "applications_clock_setting": "applications_clocks_setting",
    }.get(s, s)


def _reasons(
    values: _Values, pairs: Sequence[tuple[str, str | None]]
) -> tuple[tuple[str, ...] | None, int | None]:
    active: list[str] = []
    seen = False
    for label, raw in pairs:
        state = values.flag("throttle_reasons", raw)
        if state is None:
            continue
        seen = True
        if state:
            active.append(_reason_name(label))
    if not seen:
        return None, None
    mask = 0
    for name in active:
        mask |= THROTTLE_REASON_BITS.get(name, 0)
    return tuple(active), mask


def _sum_present(*parts: int | None) -> int | None:
    present = [p for p in parts if p is not None]
    return sum(present) if present else None


# --------------------------------------------------------------------------- entry point

_FAILURES = (
    "NVIDIA-SMI has failed",
    "No devices were found",
    "Failed to initialize NVML",
    "couldn't communicate with the NVIDIA driver",
    "Unable to determine the device handle",
)


def parse_nvidia_smi(text: str) -> NvidiaSmiReport:
    """Parse the output of ``nvidia-smi``, ``nvidia-smi -q`` or ``nvidia-smi -q -x``.

    Raises ``NvidiaSmiFailedError`` for nvidia-smi's own failure messages and
    ``NvidiaSmiParseError`` (a ``ValueError``) for anything else it cannot read.
    """
    if not isinstance(text, str):
        raise NvidiaSmiParseError(f"expected str, got {type(text).__name__}")
    body = text.lstrip("\ufeff \t\r\n")
    if not body:
        raise NvidiaSmiParseError("empty nvidia-smi output")
    if body.startswith("<"):
        return _parse_xml(body)
    if "NVSMI LOG" in body or re.search(r"^Attached GPUs\s+:", body, re.MULTILINE):
        return _parse_query(body)
    if re.search(r"^\|\s*NVIDIA-SMI\s+\S+", body, re.MULTILINE):
        return _parse_table(body)
    for failure in _FAILURES:
        if failure in body:
            first = body.splitlines()[0].strip()
            raise NvidiaSmiFailedError(f"nvidia-smi reported a failure: {first}")
    raise NvidiaSmiParseError(f"not nvidia-smi output (starts with {body[:60]!r})")


# --------------------------------------------------------------------------- XML (-q -x)

_DOCTYPE = re.compile(r"<!DOCTYPE[^>\[]*(?:\[[^\]]*\])?\s*>", re.IGNORECASE)


def _parse_xml(body: str) -> NvidiaSmiReport:
    # nvidia-smi writes a DOCTYPE naming an external DTD that is never shipped; expat does not
    # fetch it, but dropping the declaration (and refusing entity declarations) keeps a crafted
    # file from expanding entities.
    if "<!ENTITY" in body:
        raise NvidiaSmiParseError("XML with entity declarations is not nvidia-smi output")
    cleaned = _DOCTYPE.sub("", body, count=1)
    try:
        root = ET.fromstring(cleaned)
    except ET.ParseError as exc:
        raise NvidiaSmiParseError(f"malformed nvidia-smi XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiParseError(f"XML root is <{root.tag}>, expected <nvidia_smi_log>")

    def top(tag: str) -> str | None:
        el = root.find(tag)
        return None if el is None else (el.text or "").strip()

    values = _Values()
    gpus: list[NvidiaSmiGpu] = []
    processes: list[NvidiaSmiProcess] = []
    reported = False
    for position, el in enumerate(root.findall("gpu")):
        gpu = _gpu_from_tree(_XmlNode(el), position, style="xml")
        gpus.append(gpu)
        procs_el = el.find("processes")
        if procs_el is not None:
            reported = True
            for p in procs_el.findall("process_info"):
                processes.append(_xml_process(p, gpu))
    driver = values.text("driver_version", top("driver_version"))
    cuda = values.text("cuda_version", top("cuda_version"))
    return NvidiaSmiReport(
        style="xml",
        driver_version=driver,
        cuda_version=cuda,
        gpus=tuple(gpus),
        processes=tuple(processes),
        processes_reported=reported,
        timestamp=values.text("timestamp", top("timestamp")),
        attached_gpus=values.integer("attached_gpus", top("attached_gpus")),
    )


def _xml_process(el: ET.Element, gpu: NvidiaSmiGpu) -> NvidiaSmiProcess:
    v = _Values()

    def t(tag: str) -> str | None:
        c = el.find(tag)
        return None if c is None else (c.text or "").strip()

    return NvidiaSmiProcess(
        gpu_index=gpu.index,
        gpu_bus_id=gpu.bus_id,
        pid=v.integer("pid", t("pid")),
        type=v.text("type", t("type")),
        name=v.text("process_name", t("process_name")),
        used_memory_bytes=v.size("used_memory", t("used_memory")),
        gpu_instance_id=v.integer("gpu_instance_id", t("gpu_instance_id")),
        compute_instance_id=v.integer("compute_instance_id", t("compute_instance_id")),
    )


# --------------------------------------------------------------------------- a common tree view


class _Node:
    """What the field table reads: ``get(path)`` -> printed value, ``children(path)`` -> pairs."""

    def get(self, path: str) -> str | None:
        raise NotImplementedError

    def children(self, path: str) -> list[tuple[str, str | None]]:
        raise NotImplementedError

    def has(self, path: str) -> bool:
        raise NotImplementedError


class _XmlNode(_Node):
    def __init__(self, el: ET.Element) -> None:
        self.el = el

    def get(self, path: str) -> str | None:
        if path.startswith("@"):
            return self.el.get(path[1:])
        found = self.el.find(path)
        if found is None or len(found):
            return None  # absent, or a section rather than a value
        return (found.text or "").strip()

    def has(self, path: str) -> bool:
        return self.el.find(path) is not None

    def children(self, path: str) -> list[tuple[str, str | None]]:
        found = self.el.find(path)
        if found is None:
            return []
        return [(c.tag, (c.text or "").strip()) for c in found.iter() if c is not found and not len(c)]


@dataclass
class _TextEntry:
    key: str
    value: str | None
    children: list[_TextEntry]


class _TextNode(_Node):
    """A ``-q`` section; paths use "/" between keys ("FB Memory Usage/Total")."""

    def __init__(self, entries: list[_TextEntry], header: str = "") -> None:
        self.entries = entries
        self.header = header

    def _find(self, path: str) -> _TextEntry | None:
        entries = self.entries
        found: _TextEntry | None = None
        for part in path.split("/"):
            found = next((e for e in entries if e.key == part), None)
            if found is None:
                return None
            entries = found.children
        return found

    def get(self, path: str) -> str | None:
        if path == "@id":
            return self.header
        found = self._find(path)
        return None if found is None else found.value

    def has(self, path: str) -> bool:
        return self._find(path) is not None

    def children(self, path: str) -> list[tuple[str, str | None]]:
        found = self._find(path)
        if found is None:
            return []
        out: list[tuple[str, str | None]] = []

        def walk(entries: list[_TextEntry]) -> None:
            for e in entries:
                if e.value is not None:
                    out.append((e.key, e.value))
                walk(e.children)  # "HW Thermal Slowdown" is indented under "HW Slowdown"

        walk(found.children)
        return out


# --------------------------------------------------------------------------- the field table

# field -> (reader, xml paths, -q text paths); the first path that is present wins. Readers
# are the _Values methods by name.
_FieldSpec = tuple[str, tuple[str, ...], tuple[str, ...]]
_FIELDS: dict[str, _FieldSpec] = {
    "name": ("text", ("product_name",), ("Product Name",)),
    "uuid": ("text", ("uuid",), ("GPU UUID",)),
    "serial": ("text", ("serial",), ("Serial Number",)),
    "bus_id": ("text", ("@id", "pci/pci_bus_id"), ("PCI/Bus Id", "@id")),
    "product_brand": ("text", ("product_brand",), ("Product Brand",)),
    "product_architecture": ("text", ("product_architecture",), ("Product Architecture",)),
    "vbios_version": ("text", ("vbios_version",), ("VBIOS Version",)),
    "minor_number": ("integer", ("minor_number",), ("Minor Number",)),
    "persistence_mode": ("flag", ("persistence_mode",), ("Persistence Mode",)),
    "display_mode": ("flag", ("display_mode",), ("Display Mode",)),
    "display_active": ("flag", ("display_active",), ("Display Active",)),
    "driver_model": ("text", ("driver_model/current_dm",), ("Driver Model/Current",)),
    "fan_percent": ("percent", ("fan_speed",), ("Fan Speed",)),
    "temp_c": ("celsius", ("temperature/gpu_temp",), ("Temperature/GPU Current Temp",)),
    "memory_temp_c": ("celsius", ("temperature/memory_temp",), ("Temperature/Memory Current Temp",)),
    "temp_tlimit_c": ("celsius", ("temperature/gpu_temp_tlimit",), ("Temperature/GPU T.Limit Temp",)),
    "temp_shutdown_c": (
        "celsius",
        ("temperature/gpu_temp_max_threshold",),
        ("Temperature/GPU Shutdown Temp",),
    ),
    "temp_slowdown_c": (
        "celsius",
        ("temperature/gpu_temp_slow_threshold",),
        ("Temperature/GPU Slowdown Temp",),
    ),
    "temp_max_operating_c": (
        "celsius",
        ("temperature/gpu_temp_max_gpu_threshold",),
        ("Temperature/GPU Max Operating Temp",),
    ),
    "temp_max_memory_operating_c": (
        "celsius",
        ("temperature/gpu_temp_max_mem_threshold",),
        ("Temperature/Memory Max Operating Temp",),
    ),
    "temp_target_c": (
        "celsius",
        ("temperature/gpu_target_temperature",),
        ("Temperature/GPU Target Temperature",),
    ),
    "temp_shutdown_tlimit_c": (
        "celsius",
        ("temperature/gpu_temp_max_tlimit_threshold",),
        ("Temperature/GPU Shutdown T.Limit Temp",),
    ),
    "temp_slowdown_tlimit_c": (
        "celsius",
        ("temperature/gpu_temp_slow_tlimit_threshold",),
        ("Temperature/GPU Slowdown T.Limit Temp",),
    ),
    "temp_max_operating_tlimit_c": (
        "celsius",
        ("temperature/gpu_temp_max_gpu_tlimit_threshold",),
        ("Temperature/GPU Max Operating T.Limit Temp",),
    ),
    "temp_max_memory_operating_tlimit_c": (
        "celsius",
        ("temperature/gpu_temp_max_mem_tlimit_threshold",),
        ("Temperature/Memory Max Operating T.Limit Temp",),
    ),
    "power_w": (
        "watts",
        (
            "gpu_power_readings/instant_power_draw",
            "gpu_power_readings/power_draw",
            "power_readings/instant_power_draw",
            "power_readings/power_draw",
        ),
        (
            "GPU Power Readings/Instantaneous Power Draw",
            "GPU Power Readings/Power Draw",
            "Power Readings/Instantaneous Power Draw",
            "Power Readings/Power Draw",
        ),
    ),
    "power_average_w": (
        "watts",
        ("gpu_power_readings/average_power_draw", "power_readings/average_power_draw"),
        ("GPU Power Readings/Average Power Draw", "Power Readings/Average Power Draw"),
    ),
    "power_limit_w": (
        "watts",
        (
            "gpu_power_readings/current_power_limit",
            "power_readings/current_power_limit",
            "power_readings/enforced_power_limit",
            "gpu_power_readings/enforced_power_limit",
        ),
        (
            "GPU Power Readings/Current Power Limit",
            "Power Readings/Current Power Limit",
            "Power Readings/Enforced Power Limit",
            "GPU Power Readings/Enforced Power Limit",
        ),
    ),
    "power_limit_requested_w": (
        "watts",
        (
            "gpu_power_readings/requested_power_limit",
            "power_readings/requested_power_limit",
            "power_readings/power_limit",
        ),
        (
            "GPU Power Readings/Requested Power Limit",
            "Power Readings/Requested Power Limit",
            "Power Readings/Power Limit",
        ),
    ),
    "power_limit_default_w": (
        "watts",
        ("gpu_power_readings/default_power_limit", "power_readings/default_power_limit"),
        ("GPU Power Readings/Default Power Limit", "Power Readings/Default Power Limit"),
    ),
    "power_limit_min_w": (
        "watts",
        ("gpu_power_readings/min_power_limit", "power_readings/min_power_limit"),
        ("GPU Power Readings/Min Power Limit", "Power Readings/Min Power Limit"),
    ),
    "power_limit_max_w": (
        "watts",
        ("gpu_power_readings/max_power_limit", "power_readings/max_power_limit"),
        ("GPU Power Readings/Max Power Limit", "Power Readings/Max Power Limit"),
    ),
    "memory_total_bytes": ("size", ("fb_memory_usage/total",), ("FB Memory Usage/Total",)),
    "memory_used_bytes": ("size", ("fb_memory_usage/used",), ("FB Memory Usage/Used",)),
    "memory_free_bytes": ("size", ("fb_memory_usage/free",), ("FB Memory Usage/Free",)),
    "memory_reserved_bytes": ("size", ("fb_memory_usage/reserved",), ("FB Memory Usage/Reserved",)),
    "bar1_total_bytes": ("size", ("bar1_memory_usage/total",), ("BAR1 Memory Usage/Total",)),
    "bar1_used_bytes": ("size", ("bar1_memory_usage/used",), ("BAR1 Memory Usage/Used",)),
    "bar1_free_bytes": ("size", ("bar1_memory_usage/free",), ("BAR1 Memory Usage/Free",)),
    "util_gpu_percent": ("percent", ("utilization/gpu_util",), ("Utilization/Gpu",)),
    "util_memory_percent": ("percent", ("utilization/memory_util",), ("Utilization/Memory",)),
    "util_encoder_percent": ("percent", ("utilization/encoder_util",), ("Utilization/Encoder",)),
    "util_decoder_percent": ("percent", ("utilization/decoder_util",), ("Utilization/Decoder",)),
    "util_jpeg_percent": ("percent", ("utilization/jpeg_util",), ("Utilization/JPEG",)),
    "util_ofa_percent": ("percent", ("utilization/ofa_util",), ("Utilization/OFA",)),
    "graphics_clock_mhz": ("mhz", ("clocks/graphics_clock",), ("Clocks/Graphics",)),
    "sm_clock_mhz": ("mhz", ("clocks/sm_clock",), ("Clocks/SM",)),
    "memory_clock_mhz": ("mhz", ("clocks/mem_clock",), ("Clocks/Memory",)),
    "video_clock_mhz": ("mhz", ("clocks/video_clock",), ("Clocks/Video",)),
    "graphics_clock_max_mhz": ("mhz", ("max_clocks/graphics_clock",), ("Max Clocks/Graphics",)),
    "sm_clock_max_mhz": ("mhz", ("max_clocks/sm_clock",), ("Max Clocks/SM",)),
    "memory_clock_max_mhz": ("mhz", ("max_clocks/mem_clock",), ("Max Clocks/Memory",)),
    "video_clock_max_mhz": ("mhz", ("max_clocks/video_clock",), ("Max Clocks/Video",)),
    "graphics_clock_app_mhz": (
        "mhz",
        ("applications_clocks/graphics_clock",),
        ("Applications Clocks/Graphics",),
    ),
    "memory_clock_app_mhz": ("mhz", ("applications_clocks/mem_clock",), ("Applications Clocks/Memory",)),
    "graphics_clock_default_app_mhz": (
        "mhz",
        ("default_applications_clocks/graphics_clock",),
        ("Default Applications Clocks/Graphics",),
    ),
    "memory_clock_default_app_mhz": (
        "mhz",
        ("default_applications_clocks/mem_clock",),
        ("Default Applications Clocks/Memory",),
    ),
    "graphics_clock_boost_max_mhz": (
        "mhz",
        ("max_customer_boost_clocks/graphics_clock",),
        ("Max Customer Boost Clocks/Graphics",),
    ),
    "voltage_graphics_mv": ("millivolts", ("voltage/graphics_volt",), ("Voltage/Graphics",)),
    "ecc_mode_enabled": ("flag", ("ecc_mode/current_ecc",), ("ECC Mode/Current",)),
    "ecc_mode_pending_enabled": ("flag", ("ecc_mode/pending_ecc",), ("ECC Mode/Pending",)),
    "retired_pages_single_bit": (
        "integer",
        ("retired_pages/multiple_single_bit_retirement/retired_count",),
        ("Retired Pages/Single Bit ECC",),
    ),
    "retired_pages_double_bit": (
        "integer",
        ("retired_pages/double_bit_retirement/retired_count",),
        ("Retired Pages/Double Bit ECC",),
    ),
    "retired_pages_pending": (
        "flag",
        ("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
        (
            "Retired Pages/Pending Page Blacklist",
            "Retired Pages/Pending Page Retirement",
            "Retired Pages/Pending",
        ),
    ),
    "remapped_rows_correctable": (
        "integer",
        ("remapped_rows/remapped_row_corr",),
        ("Remapped Rows/Correctable Error",),
    ),
    "remapped_rows_uncorrectable": (
        "integer",
        ("remapped_rows/remapped_row_unc",),
        ("Remapped Rows/Uncorrectable Error",),
    ),
    "remapped_rows_pending": ("flag", ("remapped_rows/remapped_row_pending",), ("Remapped Rows/Pending",)),
    "remapped_rows_failure": (
        "flag",
        ("remapped_rows/remapped_row_failure",),
        ("Remapped Rows/Remapping Failure Occurred",),
    ),
    "mig_mode_enabled": ("flag", ("mig_mode/current_mig",), ("MIG Mode/Current",)),
    "mig_mode_pending_enabled": ("flag", ("mig_mode/pending_mig",), ("MIG Mode/Pending",)),
    "pcie_gen": (
        "integer",
        ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
        ("PCI/GPU Link Info/PCIe Generation/Current",),
    ),
    "pcie_gen_max": (
        "integer",
        ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
        ("PCI/GPU Link Info/PCIe Generation/Max",),
    ),
    "pcie_width": (
        "integer",
        ("pci/pci_gpu_link_info/link_widths/current_link_width",),
        ("PCI/GPU Link Info/Link Width/Current",),
    ),
    "pcie_width_max": (
        "integer",
        ("pci/pci_gpu_link_info/link_widths/max_link_width",),
        ("PCI/GPU Link Info/Link Width/Max",),
    ),
    "pcie_replay_count": ("integer", ("pci/replay_counter",), ("PCI/Replays Since Reset",)),
    "pcie_tx_bytes_per_s": ("rate", ("pci/tx_util",), ("PCI/Tx Throughput",)),
    "pcie_rx_bytes_per_s": ("rate", ("pci/rx_util",), ("PCI/Rx Throughput",)),
    "reset_required": ("flag", ("gpu_reset_status/reset_required",), ("GPU Reset Status/Reset Required",)),
    "drain_and_reset_recommended": (
        "flag",
        ("gpu_reset_status/drain_and_reset_recommended",),
        ("GPU Reset Status/Drain and Reset Recommended",),
    ),
}

# Where the ECC counter groups live. Pre-Ampere schemas count "single bit" (corrected) and
# "double bit" (uncorrected) with a total; Ampere+ count SRAM and DRAM separately (550+ split
# SRAM uncorrectable into parity and SEC-DED).
_ECC_BASE = {
    ("xml", "volatile"): "ecc_errors/volatile",
    ("xml", "aggregate"): "ecc_errors/aggregate",
    ("query", "volatile"): "ECC Errors/Volatile",
    ("query", "aggregate"): "ECC Errors/Aggregate",
}
_ECC_KEYS = {
    # role: (XML tag, -q text key)
    "sram_c": ("sram_correctable", "SRAM Correctable"),
    "sram_u": ("sram_uncorrectable", "SRAM Uncorrectable"),
    "parity": ("sram_uncorrectable_parity", "SRAM Uncorrectable Parity"),
    "secded": ("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED"),
    "dram_c": ("dram_correctable", "DRAM Correctable"),
    "dram_u": ("dram_uncorrectable", "DRAM Uncorrectable"),
    "sbe": ("single_bit/total", "Single Bit/Total"),
    "dbe": ("double_bit/total", "Double Bit/Total"),
}


def _read(values: _Values, reader: str, field: str, raw: str | None) -> object:
    if reader == "percent":
        return values.number(field, raw, ("%",))
    if reader == "celsius":
        return values.number(field, raw, ("c",))
    if reader == "watts":
        return values.number(field, raw, ("w",))
    if reader == "mhz":
        return values.number(field, raw, ("mhz",))
    if reader == "millivolts":
        return values.number(field, raw, ("mv",))
    method: Callable[[str, str | None], object] = getattr(values, reader)
    return method(field, raw)


def _first(node: _Node, paths: tuple[str, ...]) -> str | None:
    for path in paths:
        raw = node.get(path)
        if raw is not None:
            return raw
    return None


def _ecc(values: _Values, node: _Node, style: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    col = 0 if style == "xml" else 1
    for scope in ("volatile", "aggregate"):
        base = _ECC_BASE[(style, scope)]
        raw = {role: node.get(f"{base}/{names[col]}") for role, names in _ECC_KEYS.items()}
        f = f"ecc_{scope}"
        s_c = values.integer(f"{f}_sram_corrected", raw["sram_c"])
        if raw["sram_u"] is not None:
            s_u = values.integer(f"{f}_sram_uncorrected", raw["sram_u"])
        else:
            s_u = _sum_present(
                values.integer(f"{f}_sram_uncorrected", raw["parity"]),
                values.integer(f"{f}_sram_uncorrected", raw["secded"]),
            )
        d_c = values.integer(f"{f}_dram_corrected", raw["dram_c"])
        d_u = values.integer(f"{f}_dram_uncorrected", raw["dram_u"])
        out[f"{f}_sram_corrected"] = s_c
        out[f"{f}_sram_uncorrected"] = s_u
        out[f"{f}_dram_corrected"] = d_c
        out[f"{f}_dram_uncorrected"] = d_u
        sbe, dbe = raw["sbe"], raw["dbe"]
        out[f"{f}_corrected"] = (
            values.integer(f"{f}_corrected", sbe) if sbe is not None else _sum_present(s_c, d_c)
        )
        out[f"{f}_uncorrected"] = (
            values.integer(f"{f}_uncorrected", dbe) if dbe is not None else _sum_present(s_u, d_u)
        )
    return out


def _gpu_from_tree(node: _Node, position: int, style: str) -> NvidiaSmiGpu:
    values = _Values()
    kwargs: dict[str, object] = {"index": position}
    col = 1 if style == "xml" else 2
    for field, spec in _FIELDS.items():
        reader, paths = spec[0], spec[col]
        kwargs[field] = _read(values, reader, field, _first(node, paths))  # type: ignore[arg-type]
    kwargs["pstate"] = _pstate(node.get("performance_state" if style == "xml" else "Performance State"))
    cm = node.get("compute_mode" if style == "xml" else "Compute Mode")
    kwargs["compute_mode"] = _compute_mode(values, cm)
    reason_paths = (
        ("clocks_event_reasons", "clocks_throttle_reasons")
        if style == "xml"
        else ("Clocks Event Reasons", "Clocks Throttle Reasons")
    )
    for rp in reason_paths:
        if node.has(rp):
            kwargs["throttle_reasons_active"], kwargs["throttle_reasons"] = _reasons(
                values, node.children(rp)
            )
            break
    kwargs.update(_ecc(values, node, style))
    if isinstance(node, _XmlNode):
        kwargs["mig_devices"] = tuple(_xml_mig(m) for m in node.el.findall("mig_devices/mig_device"))
    kwargs["err_fields"] = tuple(dict.fromkeys(values.err_fields))
    return NvidiaSmiGpu(**kwargs)  # type: ignore[arg-type]


def _xml_mig(el: ET.Element) -> NvidiaSmiMigDevice:
    v = _Values()
    n = _XmlNode(el)
    return NvidiaSmiMigDevice(
        index=v.integer("index", n.get("index")),
        gpu_instance_id=v.integer("gpu_instance_id", n.get("gpu_instance_id")),
        compute_instance_id=v.integer("compute_instance_id", n.get("compute_instance_id")),
        sm_count=v.integer("sm_count", n.get("device_attributes/shared/multiprocessor_count")),
        memory_total_bytes=v.size("memory_total", n.get("fb_memory_usage/total")),
        memory_used_bytes=v.size("memory_used", n.get("fb_memory_usage/used")),
        memory_free_bytes=v.size("memory_free", n.get("fb_memory_usage/free")),
        memory_reserved_bytes=v.size("memory_reserved", n.get("fb_memory_usage/reserved")),
        bar1_total_bytes=v.size("bar1_total", n.get("bar1_memory_usage/total")),
        bar1_used_bytes=v.size("bar1_used", n.get("bar1_memory_usage/used")),
    )


# --------------------------------------------------------------------------- -q text

_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def _text_tree(lines: Iterator[str]) -> list[_TextEntry]:
    """Indentation -> nesting. ``Key    : value`` is a value, a bare ``Key`` opens a section."""
    root: list[_TextEntry] = []
    stack: list[tuple[int, list[_TextEntry]]] = [(-1, root)]
    for line in lines:
        line = line.rstrip("\r\n").replace("\t", "    ")
        stripped = line.strip()
        if not stripped or stripped.startswith("==="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        # Keys are padded with spaces before the colon; values (times, bus ids) contain colons.
        sep = line.find(" : ")
        if sep < 0 and line.rstrip().endswith(" :"):
            sep = len(line.rstrip()) - 2
        if sep >= 0:
            key, value = line[:sep].strip(), line[sep + 3 :].strip()
        else:
            key, value = stripped, None
        entry = _TextEntry(key, value, [])
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].append(entry)
        stack.append((indent, entry.children))
    return root


def _parse_query(body: str) -> NvidiaSmiReport:
    tree = _text_tree(iter(body.splitlines()))
    values = _Values()
    top = _TextNode(tree)
    gpus: list[NvidiaSmiGpu] = []
    processes: list[NvidiaSmiProcess] = []
    reported = False
    for entry in tree:
        m = _GPU_HEADER.match(entry.key)
        if not m:
            continue
        node = _TextNode(entry.children, header=m.group(1))
        gpu = _gpu_from_tree(node, len(gpus), style="query")
        gpus.append(gpu)
        procs = node._find("Processes")
        if procs is not None:
            reported = True
            processes.extend(_text_processes(procs.children, gpu))
    if not gpus and top.get("Attached GPUs") is None:
        raise NvidiaSmiParseError("nvidia-smi -q output without any GPU section")
    return NvidiaSmiReport(
        style="query",
        driver_version=values.text("driver_version", top.get("Driver Version")),
        cuda_version=values.text("cuda_version", top.get("CUDA Version")),
        gpus=tuple(gpus),
        processes=tuple(processes),
        processes_reported=reported,
        timestamp=values.text("timestamp", top.get("Timestamp")),
        attached_gpus=values.integer("attached_gpus", top.get("Attached GPUs")),
    )


def _text_processes(entries: list[_TextEntry], gpu: NvidiaSmiGpu) -> list[NvidiaSmiProcess]:
    # Each process is "GPU instance ID", "Compute instance ID", then "Process ID" with its
    # details indented under it.
    v = _Values()
    out: list[NvidiaSmiProcess] = []
    gi: str | None = None
    ci: str | None = None
    for e in entries:
        if e.key == "GPU instance ID":
            gi = e.value
        elif e.key == "Compute instance ID":
            ci = e.value
        elif e.key == "Process ID":
            sub = _TextNode(e.children)
            out.append(
                NvidiaSmiProcess(
                    gpu_index=gpu.index,
                    gpu_bus_id=gpu.bus_id,
                    pid=v.integer("pid", e.value),
                    type=v.text("type", sub.get("Type")),
                    name=v.text("name", sub.get("Name")),
                    used_memory_bytes=v.size("used_memory", sub.get("Used GPU Memory")),
                    gpu_instance_id=v.integer("gpu_instance_id", gi),
                    compute_instance_id=v.integer("compute_instance_id", ci),
                )
            )
            gi = ci = None
    return out


# --------------------------------------------------------------------------- default table

_T_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s+(?P<driver>\S+)(?:\s+CUDA Version:\s+(?P<cuda>\S+))?"
)
_T_ROW1_A = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persist>On|Off|N/A|ERR!|WDDM|TCC)\s*$")
_T_ROW1_B = re.compile(
    r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?P<disp>On|Off|N/A|ERR!)\s*$"
)
_T_ROW2_A = re.compile(
    r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<pwr>\S+)\s*/\s*(?P<cap>\S+)\s*$"
)
_T_ROW2_B = re.compile(r"^\s*(?P<used>\S+)\s*/\s*(?P<total>\S+)\s*$")
_T_ROW2_C = re.compile(r"^\s*(?P<util>\S+)\s+(?P<cm>\S.*?)\s*$")
_T_PROC = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+)?(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.*?)\s+(?P<mem>\d+\s*MiB|N/A)\s*\|$"
)


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _parse_table(body: str) -> NvidiaSmiReport:
    lines = [ln.rstrip("\r") for ln in body.splitlines()]
    values = _Values()
    header = None
    timestamp: str | None = None
    for i, line in enumerate(lines):
        header = _T_HEADER.search(line)
        if header:
            # nvidia-smi prints the time on the line above the box's top border.
            j = i - 1
            while j >= 0 and lines[j].lstrip().startswith(("+", "|")):
                j -= 1
            if j >= 0 and lines[j].strip():
                timestamp = lines[j].strip()
            break
    if header is None:
        raise NvidiaSmiParseError("nvidia-smi table without its 'NVIDIA-SMI ... Driver Version' header")

    gpus: list[NvidiaSmiGpu] = []
    processes: list[NvidiaSmiProcess] = []
    reported = False
    section = "gpus"
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Processes:" in line:
            section, reported = "processes", True
        elif "MIG devices:" in line:
            section = "mig"  # per-instance table: not read (-q -x carries the same data)
        if section == "gpus" and line.startswith("|"):
            cells = _cells(line)
            if len(cells) == 3:
                a, b = _T_ROW1_A.match(cells[0]), _T_ROW1_B.match(cells[1])
                if a and b:
                    block = [cells]
                    j = i + 1
                    while j < len(lines) and lines[j].startswith("|") and len(block) < 4:
                        nxt = _cells(lines[j])
                        if len(nxt) != 3 or _T_ROW1_A.match(nxt[0]):
                            break
                        block.append(nxt)
                        j += 1
                    gpus.append(_table_gpu(block))
                    i = j
                    continue
        elif section == "processes":
            pm = _T_PROC.match(line.strip())
            if pm:
                processes.append(_table_process(values, pm, gpus))
        i += 1
    if not gpus:
        raise NvidiaSmiParseError("nvidia-smi table header found but no GPU rows could be read")
    return NvidiaSmiReport(
        style="table",
        driver_version=header.group("driver"),
        cuda_version=values.text("cuda_version", header.group("cuda")),
        gpus=tuple(gpus),
        processes=tuple(processes),
        processes_reported=reported,
        timestamp=timestamp,
        nvidia_smi_version=header.group("smi"),
    )


def _table_gpu(block: list[list[str]]) -> NvidiaSmiGpu:
    if len(block) < 2:
        raise NvidiaSmiParseError(f"GPU row without its second line: {'|'.join(block[0])!r}")
    v = _Values()
    a, b = _T_ROW1_A.match(block[0][0]), _T_ROW1_B.match(block[0][1])
    assert a and b  # matched by the caller
    r2a, r2b, r2c = _T_ROW2_A.match(block[1][0]), _T_ROW2_B.match(block[1][1]), _T_ROW2_C.match(block[1][2])
    if not (r2a and r2b and r2c):
        raise NvidiaSmiParseError(f"unreadable GPU row: {'|'.join(block[1])!r}")
    name = a.group("name").strip()
    persist = a.group("persist")
    ecc_raw = block[0][2].strip()
    ecc_enabled: bool | None
    if ecc_raw == "Off":  # the table prints "Off" in the ECC column when ECC is disabled
        ecc_enabled, ecc_count = False, None
    else:
        ecc_count = v.integer("ecc_volatile_uncorrected", ecc_raw)
        ecc_enabled = True if ecc_count is not None else None
    mig: bool | None = None
    if len(block) >= 3:
        mig = v.flag("mig_mode_enabled", block[2][2])
    return NvidiaSmiGpu(
        index=int(a.group("index")),
        name=name,
        name_truncated=name.endswith("..."),
        bus_id=b.group("bus"),
        persistence_mode=v.flag("persistence_mode", persist) if persist not in ("WDDM", "TCC") else None,
        driver_model=persist if persist in ("WDDM", "TCC") else None,
        display_active=v.flag("display_active", b.group("disp")),
        ecc_mode_enabled=ecc_enabled,
        ecc_volatile_uncorrected=ecc_count,
        fan_percent=v.number("fan_percent", r2a.group("fan"), ("%",)),
        temp_c=v.number("temp_c", r2a.group("temp"), ("c",)),
        pstate=_pstate(r2a.group("perf")),
        power_w=v.number("power_w", r2a.group("pwr"), ("w",)),
        power_limit_w=v.number("power_limit_w", r2a.group("cap"), ("w",)),
        memory_used_bytes=v.size("memory_used_bytes", r2b.group("used")),
        memory_total_bytes=v.size("memory_total_bytes", r2b.group("total")),
        util_gpu_percent=v.number("util_gpu_percent", r2c.group("util"), ("%",)),
        compute_mode=_compute_mode(v, r2c.group("cm")),
        mig_mode_enabled=mig,
        err_fields=tuple(dict.fromkeys(v.err_fields)),
    )


def _table_process(v: _Values, m: re.Match[str], gpus: list[NvidiaSmiGpu]) -> NvidiaSmiProcess:
    index = int(m.group("gpu"))
    bus = next((g.bus_id for g in gpus if g.index == index), None)
    return NvidiaSmiProcess(
        gpu_index=index,
        gpu_bus_id=bus,
        pid=int(m.group("pid")),
        type=m.group("type"),
        name=m.group("name").strip() or None,
        used_memory_bytes=v.size("used_memory", m.group("mem").replace(" ", "")),
        gpu_instance_id=v.integer("gpu_instance_id", m.group("gi")),
        compute_instance_id=v.integer("compute_instance_id", m.group("ci")),
    )
