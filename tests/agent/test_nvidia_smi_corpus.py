"""parse_nvidia_smi against the shared corpus (../shared/corpus/nvidia-smi) and made-up outputs.

Each manifest fact is mapped onto the report through an explicit table: ``REPORT_CHECKS`` for
the top-level keys, ``GPU_CHECKS`` for the ``k=v`` items of each ``gpu:`` line (one line per GPU,
in order). A key the tables do not know fails the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from fleetscope.agent.records import THROTTLE_REASON_BITS
from fleetscope.agent.testing.nvidia_smi import (
    NvidiaSmiFailedError,
    NvidiaSmiGpu,
    NvidiaSmiParseError,
    NvidiaSmiReport,
    parse_nvidia_smi,
)
from tests.corpus import CORPUS_DIR, manifest_facts, require_corpus, sample_text

FOLDER = "nvidia-smi"
_NAMES = sorted(p.name for p in (CORPUS_DIR / FOLDER).glob("*.txt")) or ["<corpus missing>"]
MIB = 1 << 20
_STYLE_BY_PREFIX = {"xml-": "xml", "q-text-": "query", "table-": "table"}


# --------------------------------------------------------------------------- value conversions


def _printed_number(value: str, unit: str) -> float | None:
    """'33 C' / '38C' / '43.89 W' / '0 %' / '0%' -> number; N/A (and ERR!) -> None."""
    v = value.strip()
    if v in ("N/A", "ERR!", ""):
        return None
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*" + re.escape(unit), v)
    assert m, f"unexpected manifest value {value!r} (unit {unit})"
    return float(m.group(1))


def _printed_mib(value: str) -> int | None:
    v = value.strip()
    if v == "N/A":
        return None
    m = re.fullmatch(r"(\d+)(?:\s*MiB)?", v)
    assert m, value
    return int(m.group(1)) * MIB


def _on_off(value: str) -> bool | None:
    return {"On": True, "Off": False, "N/A": None}[value]


# The table abbreviates compute modes; the parser reports NVML's spelling.
COMPUTE_MODES = {
    "Default": "Default",
    "E. Process": "Exclusive_Process",
    "Exclusive_Process": "Exclusive_Process",
}


# ------------------------------------------------------------------------------- GPU checks

GpuCheck = Callable[[NvidiaSmiReport, NvidiaSmiGpu, str], None]


def _eq(attr: str, convert: Callable[[str], object]) -> GpuCheck:
    def check(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
        assert getattr(gpu, attr) == convert(value), (attr, value)

    return check


def check_name(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
    assert gpu.name == value
    assert gpu.name_truncated is value.endswith("...")


def check_fan(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
    assert gpu.fan_percent == _printed_number(value, "%")
    assert ("fan_percent" in gpu.err_fields) is (value == "ERR!")


def check_volatile_uncorr_ecc(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
    # The table shows the count, "N/A" (not supported) or "Off" (ECC disabled).
    if value == "Off":
        assert gpu.ecc_mode_enabled is False and gpu.ecc_volatile_uncorrected is None
    elif value == "N/A":
        assert gpu.ecc_mode_enabled is None and gpu.ecc_volatile_uncorrected is None
    else:
        assert gpu.ecc_mode_enabled is True and gpu.ecc_volatile_uncorrected == int(value)


def check_ecc_dbe_volatile_total(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
    # Double-bit = uncorrectable; for SRAM/DRAM schemas it is the sum of both uncorrectable counters.
    assert gpu.ecc_volatile_uncorrected == (None if value == "N/A" else int(value))


def check_gpu_processes(report: NvidiaSmiReport, gpu: NvidiaSmiGpu, value: str) -> None:
    expected = []
    for item in value.split(";"):
        m = re.fullmatch(r"pid (\d+) (.+) (\d+) MiB", item.strip())
        assert m, item
        expected.append((int(m.group(1)), m.group(2), int(m.group(3)) * MIB))
    got = [(p.pid, p.name, p.used_memory_bytes) for p in report.processes_of(gpu)]
    assert got == expected


GPU_CHECKS: dict[str, GpuCheck] = {
    # -q text / XML keys
    "bus_id": _eq("bus_id", str),
    "id": _eq("bus_id", str),  # the XML <gpu id="..."> attribute
    "product_name": check_name,
    "uuid": _eq("uuid", str),
    "fb_total": _eq("memory_total_bytes", _printed_mib),
    "fb_used": _eq("memory_used_bytes", _printed_mib),
    "fb_free": _eq("memory_free_bytes", _printed_mib),
    "gpu_util": _eq("util_gpu_percent", lambda v: _printed_number(v, "%")),
    "mem_util": _eq("util_memory_percent", lambda v: _printed_number(v, "%")),
    "temp": _eq("temp_c", lambda v: _printed_number(v, "C")),
    "power_draw": _eq("power_w", lambda v: _printed_number(v, "W")),
    "pstate": _eq("pstate", lambda v: int(v.lstrip("P"))),
    "ecc_dbe_volatile_total": check_ecc_dbe_volatile_total,
    "processes": check_gpu_processes,
    # default-table keys
    "index": _eq("index", int),
    "name": check_name,
    "persistence": _eq("persistence_mode", _on_off),
    "disp_a": _eq("display_active", _on_off),
    "volatile_uncorr_ecc": check_volatile_uncorr_ecc,
    "fan": check_fan,
    "perf": _eq("pstate", lambda v: int(v.lstrip("P"))),
    "pwr_usage": _eq("power_w", lambda v: _printed_number(v, "W")),
    "pwr_cap": _eq("power_limit_w", lambda v: _printed_number(v, "W")),
    "mem_used_mib": _eq("memory_used_bytes", _printed_mib),
    "mem_total_mib": _eq("memory_total_bytes", _printed_mib),
    "compute_mode": _eq("compute_mode", lambda v: COMPUTE_MODES[v]),
}

_GPU_ITEM = re.compile(r",\s*(?=[a-z_0-9]+=)")


def _gpu_items(value: str) -> list[tuple[str, str]]:
    items = []
    for part in _GPU_ITEM.split(value):
        key, _, v = part.partition("=")
        items.append((key.strip(), v.strip()))
    return items


# ------------------------------------------------------------------------------ report checks

ReportCheck = Callable[[NvidiaSmiReport, str], None]


def _absent_or(value: str) -> str | None:
    # The manifest writes a missing value as "" or "(absent)".
    return None if value in ("", "(absent)") else value


def check_attached_gpus(report: NvidiaSmiReport, value: str) -> None:
    assert report.attached_gpus == (None if _absent_or(value) is None else int(value))


def check_processes(report: NvidiaSmiReport, value: str) -> None:
    assert value == "No running processes found", f"no check written for processes={value!r}"
    assert report.processes_reported is True and report.processes == ()


REPORT_CHECKS: dict[str, ReportCheck] = {
    "timestamp": lambda r, v: _check(r.timestamp == v, ("timestamp", r.timestamp, v)),
    "driver_version": lambda r, v: _check(r.driver_version == _absent_or(v), ("driver", r.driver_version, v)),
    "cuda_version": lambda r, v: _check(r.cuda_version == _absent_or(v), ("cuda", r.cuda_version, v)),
    "nvidia_smi": lambda r, v: _check(r.nvidia_smi_version == v, ("nvidia_smi", r.nvidia_smi_version, v)),
    "attached_gpus": check_attached_gpus,
    "processes": check_processes,
}
# Manifest facts that cannot be checked, with the reason. Every fact is checkable today.
UNCHECKABLE: dict[str, str] = {}


def _check(ok: bool, what: object) -> None:
    assert ok, what


def test_manifest_and_folder_agree() -> None:
    require_corpus(FOLDER)
    entries = manifest_facts(FOLDER)
    assert set(entries) == set(_NAMES)
    for name, pairs in entries.items():
        for key, value in pairs:
            if key == "gpu":
                unknown = {k for k, _ in _gpu_items(value)} - set(GPU_CHECKS) - set(UNCHECKABLE)
                assert not unknown, f"{name}: gpu keys with no check: {unknown}"
            else:
                assert key in REPORT_CHECKS or key in UNCHECKABLE, f"{name}: no check for {key!r}"


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_sample(name: str) -> None:
    folder = require_corpus(FOLDER)
    pairs = manifest_facts(FOLDER)[name]
    report = parse_nvidia_smi(sample_text(folder / name))
    style = next(s for prefix, s in _STYLE_BY_PREFIX.items() if name.startswith(prefix))
    assert report.style == style
    gpu_lines = [v for k, v in pairs if k == "gpu"]
    assert len(gpu_lines) == len(report.gpus)
    checked = 0
    for gpu, line in zip(report.gpus, gpu_lines):
        for key, value in _gpu_items(line):
            if key not in UNCHECKABLE:
                GPU_CHECKS[key](report, gpu, value)
                checked += 1
    for key, value in pairs:
        if key != "gpu" and key not in UNCHECKABLE:
            REPORT_CHECKS[key](report, value)
            checked += 1
    assert checked
    for i, gpu in enumerate(report.gpus):
        assert gpu.index == i and gpu.bus_id and gpu.name
        if gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None:
            assert gpu.memory_used_bytes <= gpu.memory_total_bytes


def test_corpus_exhaustive_fields_on_a_full_xml() -> None:
    """Spot-check the numeric fields the manifest does not list, on one modern XML sample."""
    folder = require_corpus(FOLDER)
    report = parse_nvidia_smi(sample_text(folder / "xml-telegraf-pro-6000-maxq-blackwell-v13.xml.txt"))
    [gpu] = report.gpus
    assert gpu.power_average_w == 3.97 and gpu.power_limit_w == 300.0 and gpu.power_limit_max_w == 325.0
    assert gpu.bar1_total_bytes == 131072 * MIB and gpu.memory_reserved_bytes == 637 * MIB
    assert gpu.sm_clock_max_mhz == 3090.0 and gpu.memory_clock_mhz == 405.0
    assert gpu.pcie_gen == 1 and gpu.pcie_gen_max == 4 and gpu.pcie_width == 16
    assert gpu.temp_tlimit_c == 68.0 and gpu.temp_shutdown_tlimit_c == -5.0
    assert gpu.throttle_reasons_active == () and gpu.throttle_reasons == 0
    assert gpu.remapped_rows_correctable == 0 and gpu.remapped_rows_failure is False
    assert gpu.ecc_mode_enabled is False and gpu.ecc_volatile_uncorrected is None
    # "Requested functionality has been deprecated" is as good as N/A.
    assert gpu.graphics_clock_app_mhz is None and gpu.display_mode is None


def test_corpus_query_text_throttle_and_ecc() -> None:
    folder = require_corpus(FOLDER)
    report = parse_nvidia_smi(sample_text(folder / "q-text-thamada-L4.txt"))
    [gpu] = report.gpus
    assert (
        gpu.throttle_reasons_active == ("gpu_idle",)
        and gpu.throttle_reasons == THROTTLE_REASON_BITS["gpu_idle"]
    )
    assert gpu.ecc_volatile_corrected == 0 and gpu.ecc_aggregate_uncorrected == 0
    assert gpu.voltage_graphics_mv == 655.0 and gpu.util_jpeg_percent == 0.0
    assert report.processes_reported is True and report.processes == ()


# --------------------------------------------------------------------------- made-up outputs

_TABLE_HEADER = [
    "+---------------------------------------------------------------------------------------+",
    "| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |",
    "|-----------------------------------------+----------------------+----------------------+",
    "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                      |               MIG M. |",
    "|=========================================+======================+======================|",
]
_TABLE_GPU = [
    "|   0  Tesla V100-PCIE-32GB           Off | 00000000:AF:00.0 Off |                    2 |",
    "| 41%   63C    P0             220W / 250W |  30001MiB / 32768MiB |     97%      Default |",
    "|                                         |                      |                  N/A |",
    "+-----------------------------------------+----------------------+----------------------+",
]
_TABLE_PROCS = [
    "",
    "+---------------------------------------------------------------------------------------+",
    "| Processes:                                                                            |",
    "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
    "|        ID   ID                                                             Usage      |",
    "|=======================================================================================|",
    "|    0   N/A  N/A     41230      C   python train.py --epochs 3                29990MiB |",
    "|    0   N/A  N/A      1888      G   /usr/lib/xorg/Xorg                           10MiB |",
    "+---------------------------------------------------------------------------------------+",
]


def test_table_with_processes() -> None:
    report = parse_nvidia_smi("\n".join(_TABLE_HEADER + _TABLE_GPU + _TABLE_PROCS) + "\n")
    [gpu] = report.gpus
    assert gpu.name == "Tesla V100-PCIE-32GB" and gpu.persistence_mode is False
    assert gpu.ecc_volatile_uncorrected == 2 and gpu.fan_percent == 41.0 and gpu.util_gpu_percent == 97.0
    assert gpu.power_w == 220.0 and gpu.power_limit_w == 250.0 and gpu.memory_used_bytes == 30001 * MIB
    assert gpu.mig_mode_enabled is None
    assert [(p.pid, p.type, p.name, p.used_memory_bytes) for p in report.processes] == [
        (41230, "C", "python train.py --epochs 3", 29990 * MIB),
        (1888, "G", "/usr/lib/xorg/Xorg", 10 * MIB),
    ]
    assert all(p.gpu_bus_id == "00000000:AF:00.0" for p in report.processes)
    sample = gpu.to_gpu_sample(123, report.processes_of(gpu))
    assert sample.gpu_index == 0 and sample.power_w == 220.0 and len(sample.processes) == 2


def test_old_table_process_rows_without_instance_columns() -> None:
    procs = [
        "| Processes:                                                       GPU Memory |",
        "|  GPU       PID   Type   Process name                             Usage      |",
        "|=============================================================================|",
        "|    0      5150      C   /opt/conda/bin/python                       1536MiB |",
        "+-----------------------------------------------------------------------------+",
    ]
    report = parse_nvidia_smi("\n".join(_TABLE_HEADER + _TABLE_GPU + procs))
    [p] = report.processes
    assert (p.gpu_index, p.pid, p.type, p.name, p.used_memory_bytes) == (
        0,
        5150,
        "C",
        "/opt/conda/bin/python",
        1536 * MIB,
    )
    assert p.gpu_instance_id is None


def test_crlf_query_text_with_old_names_and_errors() -> None:
    text = "\r\n".join(
        [
            "==============NVSMI LOG==============",
            "",
            "Timestamp                           : Tue Jan  2 03:04:05 2024",
            "Driver Version                      : 470.199.02",
            "CUDA Version                        : 11.4",
            "",
            "Attached GPUs                       : 1",
            "GPU 00000000:3B:00.0",
            "    Product Name                    : Tesla T4",
            "    Fan Speed                       : [Unknown Error]",
            "    Performance State               : P0",
            "    Clocks Throttle Reasons",
            "        Idle                        : Not Active",
            "        SW Power Cap                : Active",
            "        HW Slowdown                 : Not Active",
            "            HW Thermal Slowdown     : Active",
            "    FB Memory Usage",
            "        Total                       : 15109 MiB",
            "        Used                        : 100 MiB",
            "        Free                        : 15009 MiB",
            "    Power Readings",
            "        Power Draw                  : 70.10 W",
            "        Power Limit                 : 70.00 W",
            "        Enforced Power Limit        : 70.00 W",
            "    ECC Errors",
            "        Volatile",
            "            Single Bit",
            "                Total               : 3",
            "            Double Bit",
            "                Total               : 0",
            "    Temperature",
            "        GPU Current Temp            : [N/A]",
            "",
        ]
    )
    report = parse_nvidia_smi(text)
    [gpu] = report.gpus
    assert report.style == "query" and report.driver_version == "470.199.02" and report.attached_gpus == 1
    assert gpu.bus_id == "00000000:3B:00.0" and gpu.pstate == 0
    assert gpu.fan_percent is None and "fan_percent" in gpu.err_fields
    assert gpu.temp_c is None and "temp_c" not in gpu.err_fields
    assert set(gpu.throttle_reasons_active or ()) == {"sw_power_cap", "hw_thermal_slowdown"}
    assert (
        gpu.throttle_reasons
        == THROTTLE_REASON_BITS["sw_power_cap"] | THROTTLE_REASON_BITS["hw_thermal_slowdown"]
    )
    assert gpu.power_w == 70.1 and gpu.power_limit_w == 70.0 and gpu.power_limit_requested_w == 70.0
    assert gpu.ecc_volatile_corrected == 3 and gpu.ecc_volatile_uncorrected == 0
    assert report.processes_reported is False


def test_xml_values_not_supported_and_entities() -> None:
    xml = (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        "<driver_version>550.1</driver_version><attached_gpus>1</attached_gpus>\n"
        '<gpu id="00000000:01:00.0"><product_name>Made Up GPU</product_name>'
        "<fan_speed>[Not Supported]</fan_speed><temperature><gpu_temp>ERR!</gpu_temp></temperature>"
        "<utilization><gpu_util>12 %</gpu_util></utilization></gpu>\n</nvidia_smi_log>\n"
    )
    report = parse_nvidia_smi(xml)
    [gpu] = report.gpus
    assert gpu.fan_percent is None and gpu.temp_c is None and gpu.err_fields == ("temp_c",)
    assert gpu.util_gpu_percent == 12.0 and report.cuda_version is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "hello world\n",
        "<nvidia_smi_log><gpu id='x'><product_name>cut off",
        "<?xml version='1.0'?><something_else/>",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
        "\n".join(_TABLE_HEADER) + "\n+---+\n",  # a header and no GPU rows
        "\n".join(_TABLE_HEADER + _TABLE_GPU[:1] + ["| broken | row | here |"]),
        "==============NVSMI LOG==============\n\nTimestamp : now\n",
    ],
)
def test_malformed_input_raises_a_value_error(text: str) -> None:
    with pytest.raises(NvidiaSmiParseError) as info:
        parse_nvidia_smi(text)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ],
)
def test_nvidia_smi_failure_messages(text: str) -> None:
    with pytest.raises(NvidiaSmiFailedError):
        parse_nvidia_smi(text)


def test_non_text_input() -> None:
    with pytest.raises(NvidiaSmiParseError):
        parse_nvidia_smi(b"<nvidia_smi_log/>")  # type: ignore[arg-type]
