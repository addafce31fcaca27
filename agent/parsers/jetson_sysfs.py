"""What a Jetson tells through files, read without spawning ``tegrastats``.

Pure functions of a filesystem root (``root``, default ``/``), so tests and recorded trees can
stand in for a board. Nothing here raises for a missing, unreadable (debugfs as non-root,
``EAGAIN`` from a powered-down sensor) or garbled file: that value is ``None``.

:func:`detect_jetson` -- the board, read once at start-up:

* ``/proc/device-tree/model`` (NUL-terminated; ``/sys/firmware/devicetree/base/model`` as a
  fallback) and ``/proc/device-tree/compatible`` (NUL-separated, ``nvidia,tegra234``...).
* ``/etc/nv_tegra_release``: ``# R35 (release), REVISION: 4.1, GCID: ..., BOARD: t186ref, ...``
  gives L4T 35.4.1, mapped to a JetPack version by :data:`L4T_TO_JETPACK`.
* ``/etc/nvpmodel.conf`` (``< POWER_MODEL ID=0 NAME=MAXN >`` and ``< PM_CONFIG DEFAULT=2 >``;
  usually an absolute symlink, followed inside ``root``) and ``/var/lib/nvpmodel/status``
  (``pmode:0002``) give the power mode.

:func:`read_jetson_sysfs` -- the cheap per-sample readings, by board:

GPU load, 0..1000 (tenths of a percent), in the nvgpu device's ``load``:
  TX1/Nano (t210) ``/sys/devices/57000000.gpu/load``; TX2 (t186) ``/sys/devices/17000000.gp10b``;
  AGX/NX Xavier (t194) ``/sys/devices/17000000.gv11b``; all of these on L4T 28/32 also as
  ``/sys/devices/gpu.0/load``. Orin on L4T 35 ``/sys/devices/platform/gpu.0/load`` (the
  ``17000000.ga10b`` device), on L4T 36 ``/sys/devices/platform/bus@0/17000000.gpu/load``.
  The GPU devfreq node's ``device/load`` is tried first, which covers all of them. Thor
  (L4T 38+) drives its GPU with the OpenRM driver and no nvgpu ``load`` file is known there,
  so its load is None here (NVML is the source on Thor).
GPU frequency, ``/sys/class/devfreq/<node>/{cur,min,max}_freq`` in Hz:
  ``57000000.gpu`` (TX1/Nano), ``17000000.gp10b`` (TX2), ``17000000.gv11b`` (Xavier),
  ``17000000.ga10b`` (Orin, L4T 35), ``17000000.gpu`` (Orin, L4T 36), ``gpu-gpc-0`` (Thor, one
  node per GPC; the first is reported). jetson_clocks pins the GPU by setting min == max, so that
  is what :attr:`JetsonSysfsReading.jetson_clocks_on` looks at.
Temperatures, ``/sys/class/thermal/thermal_zone*/{type,temp}`` in millidegrees C, every board:
  zone names differ (``CPU-therm``/``GPU-therm`` on L4T 32, ``cpu-thermal``/``tj-thermal`` on
  Orin). -256 °C is the driver's value for a sensor that is off (Xavier/Orin CV zones) and reads
  as ``None``, like the ``EAGAIN`` those zones may return instead.
Power rails, INA3221 monitors:
  L4T 24..32 (TX1, TX2, Nano, Xavier L4T 32): the NVIDIA iio driver,
  ``/sys/bus/i2c/drivers/ina3221x/<bus>-004x/iio:device*/rail_name_N`` with
  ``in_power{N}_input`` (mW), ``in_current{N}_input`` (mA), ``in_voltage{N}_input`` (mV)
  (TX1 ``1-0040``, TX2 ``0-0040`` and ``0-0041``, Nano ``6-0040``, AGX Xavier ``1-0040`` and
  ``1-0041``, Xavier NX ``7-0040``). L4T 35+ (Xavier JP5, Orin, Thor): the hwmon driver,
  ``/sys/bus/i2c/drivers/ina3221/<bus>-004x/hwmon/hwmon*`` (also listed under
  ``/sys/class/hwmon`` with ``name`` ``ina3221``), channel N labelled by ``in{N}_label`` (or
  ``curr{N}_label`` on some L4T 36 kernels) with ``in{N}_input`` mV and ``curr{N}_input`` mA;
  power is their product. Channels labelled ``NC`` or "sum of shunt voltages" are skipped.
CPU, ``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`` (kHz), ``cpu*/online``:
  every board; ``cpu0`` often has no ``online`` file, then ``/sys/devices/system/cpu/online``
  (a range list such as ``0-3,5``) decides.
EMC (memory) frequency in Hz, debugfs, so root only:
  BPMP boards (TX2, Xavier, Orin, Thor) ``/sys/kernel/debug/bpmp/debug/clk/emc/rate``;
  t210 (TX1, Nano) ``/sys/kernel/debug/clk/emc/clk_rate``.
Fan, PWM 0..255:
  L4T 32 ``/sys/devices/pwm-fan/target_pwm`` (and ``rpm_measured``); L4T 35+ a hwmon named
  ``pwmfan`` with ``pwm1``, its speed on a tachometer hwmon (``rpm`` or ``fan1_input``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "L4T_TO_JETPACK",
    "JetsonBoard",
    "JetsonCpuCore",
    "JetsonRail",
    "JetsonSysfsReading",
    "JetsonThermalZone",
    "detect_jetson",
    "jetpack_for_l4t",
    "read_jetson_sysfs",
]

ROOT = Path("/")

# L4T (Jetson Linux) release -> JetPack, from NVIDIA's JetPack archive
# (developer.nvidia.com/embedded/jetpack-archive). Several JetPacks shipped the same L4T for
# different modules, hence "3.0 / 2.3.1". A release missing here maps to None rather than to a
# nearby guess: 36.4.0 and 36.4.3 are different JetPacks.
L4T_TO_JETPACK: Mapping[str, str] = {
    "24.1.0": "2.2",
    "24.2.0": "2.3",
    "24.2.1": "3.0 / 2.3.1",
    "27.1.0": "3.0",
    "28.1.0": "3.1",
    "28.2.0": "3.2",
    "28.2.1": "3.3 / 3.2.1",
    "28.3.0": "3.3.1",
    "28.4.0": "3.3.3",
    "31.0.2": "4.1",
    "31.1.0": "4.1.1",
    "32.1.0": "4.2",
    "32.2.0": "4.2.1",
    "32.2.1": "4.2.2",
    "32.2.3": "4.2.3",
    "32.3.1": "4.3",
    "32.4.2": "4.4 DP",
    "32.4.3": "4.4",
    "32.4.4": "4.4.1",
    "32.5.0": "4.5",
    "32.5.1": "4.5.1",
    "32.5.2": "4.5.1",
    "32.6.1": "4.6",
    "32.7.1": "4.6.1",
    "32.7.2": "4.6.2",
    "32.7.3": "4.6.3",
    "32.7.4": "4.6.4",
    "32.7.5": "4.6.5",
    "32.7.6": "4.6.6",
    "34.1.0": "5.0 DP",
    "34.1.1": "5.0.1 DP",
    "35.1.0": "5.0.2",
    "35.2.1": "5.1",
    "35.3.1": "5.1.1",
    "35.4.1": "5.1.2",
    "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "35.6.1": "5.1.5",
    "36.2.0": "6.0 DP",
    "36.3.0": "6.0",
    "36.4.0": "6.1",
    "36.4.3": "6.2",
    "36.4.4": "6.2.1",
    "36.4.7": "6.2.1",
    "38.2.0": "7.0",
    "38.2.1": "7.0",
    "38.2.2": "7.0",
    "38.4.0": "7.1",
    "39.2.0": "7.2",
}

# A GPU clock is at least ~70 MHz, i.e. >= 7e7 in Hz; a devfreq value below 1e7 can only be kHz.
_KHZ_BELOW = 10_000_000
# What the Tegra thermal drivers report for a sensor that is powered off (-256 °C).
_SENSOR_OFF_MILLIC = -256_000

_GPU_DEVFREQ_NAMES = (
    "17000000.gpu",
    "17000000.ga10b",
    "17000000.gv11b",
    "17000000.gp10b",
    "57000000.gpu",
    "gpu-gpc-0",
)
_GPU_LOAD_PATHS = (
    "sys/devices/gpu.0/load",
    "sys/devices/platform/gpu.0/load",
    "sys/devices/platform/bus@0/17000000.gpu/load",
    "sys/devices/platform/17000000.ga10b/load",
    "sys/devices/17000000.ga10b/load",
    "sys/devices/17000000.gv11b/load",
    "sys/devices/17000000.gp10b/load",
    "sys/devices/57000000.gpu/load",
)
_EMC_RATE_PATHS = (
    "sys/kernel/debug/bpmp/debug/clk/emc/rate",
    "sys/kernel/debug/clk/emc/clk_rate",
)
_FAN_HWMON_NAMES = ("pwmfan", "pwm-fan", "pwm_fan")

_RELEASE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)")
_RELEASE_BOARD = re.compile(r"BOARD:\s*([^,\s]+)")
_POWER_MODEL = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)")
_PM_DEFAULT = re.compile(r"<\s*PM_CONFIG\s+DEFAULT=(\d+)")
_PMODE = re.compile(r"pmode:\s*(\d+)")
_CHANNEL_LABEL = re.compile(r"(?:in|curr)(\d+)_label")
_TRAILING_INT = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class JetsonBoard:
    """Which Jetson this is and how it is configured."""

    model: str | None  # device-tree model, e.g. "NVIDIA Jetson Orin Nano Developer Kit"
    compatible: tuple[str, ...] = ()  # device-tree compatible list, most specific first
    soc: str | None = None  # "tegra234", from the compatible list
    l4t_release: str | None = None  # "35.4.1"
    l4t_major: int | None = None  # 35
    l4t_revision: str | None = None  # "4.1"
    l4t_board: str | None = None  # "t186ref" (BOARD: in nv_tegra_release)
    jetpack_version: str | None = None  # "5.1.2", see L4T_TO_JETPACK
    power_mode_id: int | None = None  # current nvpmodel mode, from /var/lib/nvpmodel/status
    power_mode_name: str | None = None  # its NAME= in nvpmodel.conf, e.g. "MAXN"
    power_mode_default_id: int | None = None
    power_modes: Mapping[int, str] = field(default_factory=dict)  # every mode in nvpmodel.conf


@dataclass(frozen=True)
class JetsonCpuCore:
    index: int
    online: bool | None
    freq_mhz: int | None  # None while the core is offline


@dataclass(frozen=True)
class JetsonThermalZone:
    index: int  # N of thermal_zoneN
    name: str  # the zone's type, e.g. "cpu-thermal", "GPU-therm"
    temp_c: float | None


@dataclass(frozen=True)
class JetsonRail:
    """One INA3221 channel, by its label (VDD_IN, VDD_CPU_GPU_CV, POM_5V_GPU, ...)."""

    name: str
    power_mw: int | None
    voltage_mv: int | None = None
    current_ma: int | None = None


@dataclass(frozen=True)
class JetsonSysfsReading:
    gpu_load_pct: float | None = None
    gpu_freq_mhz: int | None = None
    gpu_min_freq_mhz: int | None = None
    gpu_max_freq_mhz: int | None = None
    gpu_devfreq: str | None = None  # the devfreq node read, e.g. "17000000.ga10b"
    emc_freq_mhz: int | None = None
    cpu_cores: tuple[JetsonCpuCore, ...] = ()
    thermal_zones: tuple[JetsonThermalZone, ...] = ()
    rails: tuple[JetsonRail, ...] = ()
    fan_pwm: int | None = None  # 0..255
    fan_rpm: int | None = None
    jetson_clocks_on: bool | None = None  # GPU devfreq min == max

    @property
    def temps_c(self) -> dict[str, float]:
        """Readable zones by name (the first zone wins where two share a name)."""
        temps: dict[str, float] = {}
        for zone in self.thermal_zones:
            if zone.temp_c is not None:
                temps.setdefault(zone.name, zone.temp_c)
        return temps

    @property
    def rails_mw(self) -> dict[str, int]:
        return {rail.name: rail.power_mw for rail in self.rails if rail.power_mw is not None}

    @property
    def fan_pct(self) -> float | None:
        return None if self.fan_pwm is None else round(self.fan_pwm * 100 / 255, 1)


# ------------------------------------------------------------------------------- file access


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _read_str(path: Path) -> str | None:
    """The file's text without NULs and surrounding whitespace; None when empty."""
    text = _read_text(path)
    text = text.replace("\x00", " ").strip() if text is not None else None
    return text or None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None or not text.split():
        return None
    try:
        return int(text.split()[0])
    except ValueError:
        return None


def _by_trailing_number(paths: Iterable[Path]) -> list[Path]:
    """thermal_zone2 before thermal_zone10; names without a trailing number are dropped."""
    numbered = [(int(m.group(1)), p) for p in paths if (m := _TRAILING_INT.search(p.name))]
    return [p for _, p in sorted(numbered)]


def _trailing_number(path: Path) -> int:
    m = _TRAILING_INT.search(path.name)
    return int(m.group(1)) if m else -1


def _list_dir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


def _resolve_in_root(root: Path, path: Path) -> Path:
    """Follow an absolute symlink (nvpmodel.conf -> /etc/nvpmodel/...) inside ``root``."""
    try:
        target = path.readlink() if path.is_symlink() else None
    except OSError:
        return path
    if target is not None and target.is_absolute():
        return root / target.relative_to("/")
    return path


# ---------------------------------------------------------------------------------- the board


def jetpack_for_l4t(release: str) -> str | None:
    """'35.4.1' -> '5.1.2'; a two-part release ('39.2') is read as '39.2.0'."""
    parts = (release.split(".") + ["0", "0"])[:3]
    return L4T_TO_JETPACK.get(".".join(parts))


def _device_tree(root: Path, name: str) -> str | None:
    for base in ("proc/device-tree", "sys/firmware/devicetree/base"):
        text = _read_text(root / base / name)
        if text is not None:
            return text
    return None


def _model(root: Path) -> str | None:
    text = _device_tree(root, "model")
    if text is None:
        return None
    return text.replace("\x00", "").strip() or None


def _compatible(root: Path) -> tuple[str, ...]:
    text = _device_tree(root, "compatible") or ""
    return tuple(c.strip() for c in text.split("\x00") if c.strip())


def _soc(compatible: tuple[str, ...]) -> str | None:
    for entry in compatible:
        m = re.fullmatch(r"nvidia,(tegra\d+)", entry)
        if m:
            return m.group(1)
    return None


def _looks_like_tegra(model: str | None, compatible: tuple[str, ...]) -> bool:
    lowered = (model or "").lower()
    return "jetson" in lowered or "tegra" in lowered or _soc(compatible) is not None


def _release_fields(text: str | None) -> dict[str, object]:
    m = _RELEASE.search(text or "")
    if not m:
        return {}
    major, revision = int(m.group(1)), m.group(2)
    board = _RELEASE_BOARD.search(text or "")
    release = f"{major}.{revision}"
    return {
        "l4t_release": release,
        "l4t_major": major,
        "l4t_revision": revision,
        "l4t_board": board.group(1) if board else None,
        "jetpack_version": jetpack_for_l4t(release),
    }


def _power_mode_fields(root: Path) -> dict[str, object]:
    conf = _read_text(_resolve_in_root(root, root / "etc/nvpmodel.conf")) or ""
    modes = {int(i): name for i, name in _POWER_MODEL.findall(conf)}
    default = _PM_DEFAULT.search(conf)
    status = _PMODE.search(_read_text(root / "var/lib/nvpmodel/status") or "")
    mode_id = int(status.group(1)) if status else None
    return {
        "power_mode_id": mode_id,
        "power_mode_name": modes.get(mode_id) if mode_id is not None else None,
        "power_mode_default_id": int(default.group(1)) if default else None,
        "power_modes": modes,
    }


def detect_jetson(root: Path = ROOT) -> JetsonBoard | None:
    """The Jetson board under ``root``, or None when nothing there says it is one."""
    model = _model(root)
    compatible = _compatible(root)
    release = _release_fields(_read_text(root / "etc/nv_tegra_release"))
    if not release and not _looks_like_tegra(model, compatible):
        return None
    return JetsonBoard(
        model=model,
        compatible=compatible,
        soc=_soc(compatible),
        **release,  # type: ignore[arg-type]
        **_power_mode_fields(root),  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------------- readings


def _freq_mhz(value: int | None) -> int | None:
    if value is None:
        return None
    return value // 1000 if value < _KHZ_BELOW else value // 1_000_000


def _gpu_devfreq(root: Path) -> Path | None:
    nodes = {p.name: p for p in _list_dir(root / "sys/class/devfreq")}
    for name in _GPU_DEVFREQ_NAMES:
        if name in nodes:
            return nodes[name]
    # Thor's gpu-nvd-* nodes clock the video engines, not the GPU.
    others = [name for name in sorted(nodes) if "gpu" in name and "nvd" not in name]
    return nodes[others[0]] if others else None


def _gpu_load_pct(root: Path, devfreq: Path | None) -> float | None:
    candidates = [devfreq / "device/load"] if devfreq is not None else []
    candidates += [root / p for p in _GPU_LOAD_PATHS]
    for path in candidates:
        tenths = _read_int(path)
        if tenths is not None:
            return tenths / 10
    return None


def _gpu_fields(root: Path) -> dict[str, object]:
    devfreq = _gpu_devfreq(root)
    fields: dict[str, object] = {"gpu_load_pct": _gpu_load_pct(root, devfreq)}
    if devfreq is None:
        return fields
    min_mhz = _freq_mhz(_read_int(devfreq / "min_freq"))
    max_mhz = _freq_mhz(_read_int(devfreq / "max_freq"))
    fields.update(
        gpu_devfreq=devfreq.name,
        gpu_freq_mhz=_freq_mhz(_read_int(devfreq / "cur_freq")),
        gpu_min_freq_mhz=min_mhz,
        gpu_max_freq_mhz=max_mhz,
        jetson_clocks_on=None if min_mhz is None or max_mhz is None else min_mhz == max_mhz,
    )
    return fields


def _emc_freq_mhz(root: Path) -> int | None:
    for path in _EMC_RATE_PATHS:
        hz = _read_int(root / path)
        if hz is not None:
            return hz // 1_000_000
    return None


def _cpu_list(text: str | None) -> set[int] | None:
    """'0-3,5' -> {0, 1, 2, 3, 5}; None when unreadable."""
    if text is None or not text.strip():
        return None
    cpus: set[int] = set()
    try:
        for part in text.strip().split(","):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return None
    return cpus


def _core_online(core_dir: Path, index: int, online_list: set[int] | None) -> bool | None:
    flag = _read_int(core_dir / "online")
    if flag is not None:
        return flag == 1
    return None if online_list is None else index in online_list


def _cpu_cores(root: Path) -> tuple[JetsonCpuCore, ...]:
    base = root / "sys/devices/system/cpu"
    online_list = _cpu_list(_read_text(base / "online"))
    cores = []
    for core_dir in _by_trailing_number(p for p in _list_dir(base) if re.fullmatch(r"cpu\d+", p.name)):
        index = _trailing_number(core_dir)
        online = _core_online(core_dir, index, online_list)
        # An offline core's cpufreq policy still shows its cluster's clock; tegrastats says "off".
        khz = None if online is False else _read_int(core_dir / "cpufreq/scaling_cur_freq")
        cores.append(JetsonCpuCore(index, online, None if khz is None else khz // 1000))
    return tuple(cores)


def _thermal_zones(root: Path) -> tuple[JetsonThermalZone, ...]:
    zones_dir = root / "sys/class/thermal"
    zones = []
    for zone in _by_trailing_number(p for p in _list_dir(zones_dir) if p.name.startswith("thermal_zone")):
        millic = _read_int(zone / "temp")
        temp_c = None if millic is None or millic <= _SENSOR_OFF_MILLIC else millic / 1000
        zones.append(JetsonThermalZone(_trailing_number(zone), _read_str(zone / "type") or zone.name, temp_c))
    return tuple(zones)


def _hwmon_dirs(root: Path, names: tuple[str, ...] | None = None) -> Iterator[Path]:
    """hwmon folders under /sys/class/hwmon whose ``name`` starts with one of ``names``."""
    for hwmon in _list_dir(root / "sys/class/hwmon"):
        name = _read_str(hwmon / "name") or ""
        if names is None or name.startswith(names):
            yield hwmon


def _ina3221_hwmon_dirs(root: Path) -> list[Path]:
    found = sorted(root.glob("sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"))
    found += list(_hwmon_dirs(root, ("ina3221",)))
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def _power_mw(voltage_mv: int | None, current_ma: int | None) -> int | None:
    if voltage_mv is None or current_ma is None:
        return None
    return round(voltage_mv * current_ma / 1000)


def _skipped_label(label: str) -> bool:
    return label == "NC" or label.startswith("NC ") or "sum of shunt" in label.lower()


def _hwmon_rails(hwmon: Path) -> Iterator[JetsonRail]:
    channels = sorted({int(m.group(1)) for p in _list_dir(hwmon) if (m := _CHANNEL_LABEL.fullmatch(p.name))})
    for n in channels:
        label = _read_str(hwmon / f"in{n}_label") or _read_str(hwmon / f"curr{n}_label")
        if label is None or _skipped_label(label):
            continue
        mv, ma = _read_int(hwmon / f"in{n}_input"), _read_int(hwmon / f"curr{n}_input")
        if mv is not None or ma is not None:
            yield JetsonRail(label, _power_mw(mv, ma), mv, ma)


def _iio_rails(device: Path) -> Iterator[JetsonRail]:
    for name_file in _by_trailing_number(device.glob("rail_name_*")):
        n = _trailing_number(name_file)
        label = _read_str(name_file)
        if label is None:
            continue
        mw = _read_int(device / f"in_power{n}_input")
        mv, ma = _read_int(device / f"in_voltage{n}_input"), _read_int(device / f"in_current{n}_input")
        if mw is None:
            mw = _power_mw(mv, ma)
        if mw is not None or mv is not None or ma is not None:
            yield JetsonRail(label, mw, mv, ma)


def _rails(root: Path) -> tuple[JetsonRail, ...]:
    rails: dict[str, JetsonRail] = {}
    for hwmon in _ina3221_hwmon_dirs(root):
        for rail in _hwmon_rails(hwmon):
            rails.setdefault(rail.name, rail)
    for device in sorted(root.glob("sys/bus/i2c/drivers/ina3221x/*/iio:device*")):
        for rail in _iio_rails(device):
            rails.setdefault(rail.name, rail)
    return tuple(rails.values())


def _first_int(paths: Iterable[Path]) -> int | None:
    for path in paths:
        value = _read_int(path)
        if value is not None:
            return value
    return None


def _fan_fields(root: Path) -> dict[str, object]:
    legacy = root / "sys/devices/pwm-fan"
    fan_hwmons = list(_hwmon_dirs(root, _FAN_HWMON_NAMES))
    tach_hwmons = [h for h in _hwmon_dirs(root) if "tach" in (_read_str(h / "name") or "")]
    pwm = _first_int([legacy / "target_pwm", *(h / "pwm1" for h in fan_hwmons)])
    rpm = _first_int(
        [
            legacy / "rpm_measured",
            *(h / "fan1_input" for h in fan_hwmons),
            *(h / f for h in tach_hwmons for f in ("rpm", "fan1_input")),
        ]
    )
    return {"fan_pwm": pwm, "fan_rpm": rpm}


def read_jetson_sysfs(root: Path = ROOT) -> JetsonSysfsReading:
    """One reading of everything above that ``root`` offers; absent values are None."""
    return JetsonSysfsReading(
        **_gpu_fields(root),  # type: ignore[arg-type]
        **_fan_fields(root),  # type: ignore[arg-type]
        emc_freq_mhz=_emc_freq_mhz(root),
        cpu_cores=_cpu_cores(root),
        thermal_zones=_thermal_zones(root),
        rails=_rails(root),
    )
