"""detect_jetson and read_jetson_sysfs over sysfs trees built in tmp_path.

The trees follow the layouts documented in fleetscope.agent.parsers.jetson_sysfs: an Orin Nano
on L4T 36 (hwmon INA3221 with ``curr*_label``, devfreq ``17000000.gpu`` whose device holds
``load``, nvpmodel.conf as an absolute symlink), a Xavier NX on L4T 35 (hwmon INA3221 with
``in*_label``, ``/sys/devices/gpu.0/load``, jetson_clocks on) and a TX2 on L4T 32 (the
``ina3221x`` iio driver, ``/sys/devices/pwm-fan``, Denver cores offline). Values are invented.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from fleetscope.agent.parsers.jetson_sysfs import (
    L4T_TO_JETPACK,
    JetsonCpuCore,
    JetsonRail,
    JetsonSysfsReading,
    JetsonThermalZone,
    detect_jetson,
    jetpack_for_l4t,
    read_jetson_sysfs,
)


def build_tree(root: Path, files: Mapping[str, str], links: Mapping[str, str] | None = None) -> Path:
    """Write ``files`` (path relative to root -> content) and symlinks (link -> target as given)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    for rel, target in (links or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    return root


def _thermal(zones: Mapping[int, tuple[str, str | None]]) -> dict[str, str]:
    files: dict[str, str] = {}
    for index, (kind, millic) in zones.items():
        files[f"sys/class/thermal/thermal_zone{index}/type"] = kind + "\n"
        if millic is not None:
            files[f"sys/class/thermal/thermal_zone{index}/temp"] = millic + "\n"
    return files


def _cpus(khz: Mapping[int, int], online: Mapping[int, int]) -> dict[str, str]:
    files = {f"sys/devices/system/cpu/cpu{i}/cpufreq/scaling_cur_freq": f"{f}\n" for i, f in khz.items()}
    files.update({f"sys/devices/system/cpu/cpu{i}/online": f"{v}\n" for i, v in online.items()})
    return files


INA_ORIN = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
ORIN_NANO: dict[str, str] = {
    "proc/device-tree/model": "NVIDIA Jetson Orin Nano Developer Kit\x00",
    "proc/device-tree/compatible": "nvidia,p3768-0000+p3767-0005\x00nvidia,p3767-0005\x00nvidia,tegra234\x00",
    "etc/nv_tegra_release": (
        "# R36 (release), REVISION: 4.3, GCID: 11111111, BOARD: generic, EABI: aarch64, "
        "DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\n"
    ),
    "etc/nvpmodel/nvpmodel_p3767_0005.conf": (
        "< POWER_MODEL ID=0 NAME=15W >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=7W >\n"
        "CPU_ONLINE CORE_4 0\n< PM_CONFIG DEFAULT=0 >\n"
    ),
    "var/lib/nvpmodel/status": "pmode:0001 fmode:quiet\n",
    "sys/class/devfreq/17000000.gpu/cur_freq": "306000000\n",
    "sys/class/devfreq/17000000.gpu/min_freq": "306000000\n",
    "sys/class/devfreq/17000000.gpu/max_freq": "624750000\n",
    "sys/class/devfreq/3d00000.pcie/cur_freq": "1000000000\n",
    "sys/devices/platform/bus@0/17000000.gpu/load": "345\n",
    **_thermal(
        {
            0: ("cpu-thermal", "47500"),
            1: ("gpu-thermal", "46031"),
            2: ("cv0-thermal", None),  # powered down: temp unreadable
            3: ("cv1-thermal", "-256000"),
            10: ("tj-thermal", "48000"),
        }
    ),
    f"{INA_ORIN}/name": "ina3221\n",
    f"{INA_ORIN}/curr1_label": "VDD_IN\n",
    f"{INA_ORIN}/in1_input": "5000\n",
    f"{INA_ORIN}/curr1_input": "1001\n",
    f"{INA_ORIN}/curr2_label": "VDD_CPU_GPU_CV\n",
    f"{INA_ORIN}/in2_input": "4990\n",
    f"{INA_ORIN}/curr2_input": "120\n",
    f"{INA_ORIN}/curr3_label": "VDD_SOC\n",
    f"{INA_ORIN}/in3_input": "5010\n",
    f"{INA_ORIN}/curr3_input": "300\n",
    f"{INA_ORIN}/in7_label": "sum of shunt voltages\n",
    f"{INA_ORIN}/in7_input": "40\n",
    **_cpus(
        {0: 729600, 1: 729600, 2: 729600, 3: 1510400, 4: 729600, 5: 729600}, {1: 1, 2: 1, 3: 1, 4: 0, 5: 0}
    ),
    "sys/devices/system/cpu/online": "0-3\n",
    "sys/kernel/debug/bpmp/debug/clk/emc/rate": "2133000000\n",
    "sys/class/hwmon/hwmon2/name": "pwmfan\n",
    "sys/class/hwmon/hwmon2/pwm1": "102\n",
    "sys/class/hwmon/hwmon3/name": "pwm_tach\n",
    "sys/class/hwmon/hwmon3/rpm": "2410\n",
}
ORIN_NANO_LINKS = {
    "etc/nvpmodel.conf": "/etc/nvpmodel/nvpmodel_p3767_0005.conf",
    "sys/class/devfreq/17000000.gpu/device": "../../../devices/platform/bus@0/17000000.gpu",
    # The class entry and the i2c driver's entry are the same device: its rails count once.
    "sys/class/hwmon/hwmon1": f"../../../{INA_ORIN}",
}

INA_NX = "sys/bus/i2c/drivers/ina3221/7-0040/hwmon/hwmon4"
XAVIER_NX: dict[str, str] = {
    "proc/device-tree/model": "NVIDIA Jetson Xavier NX Developer Kit\x00",
    "proc/device-tree/compatible": "nvidia,p3509-0000+p3668-0001\x00nvidia,jetson-xavier-nx\x00nvidia,tegra194\x00",
    "etc/nv_tegra_release": (
        "# R35 (release), REVISION: 4.1, GCID: 22222222, BOARD: t186ref, EABI: aarch64, "
        "DATE: Tue Aug  1 19:57:35 UTC 2023\n"
    ),
    "etc/nvpmodel.conf": (
        "< POWER_MODEL ID=2 NAME=MODE_15W_6CORE >\n< POWER_MODEL ID=8 NAME=MODE_20W_6CORE >\n"
        "< PM_CONFIG DEFAULT=2 >\n"
    ),
    "var/lib/nvpmodel/status": "pmode:0008\n",
    "sys/class/devfreq/17000000.gv11b/cur_freq": "1109250000\n",
    "sys/class/devfreq/17000000.gv11b/min_freq": "1109250000\n",
    "sys/class/devfreq/17000000.gv11b/max_freq": "1109250000\n",
    "sys/devices/gpu.0/load": "512\n",
    **_thermal(
        {
            0: ("AUX-therm", "30000"),
            1: ("CPU-therm", "33500"),
            2: ("GPU-therm", "31500"),
            3: ("PMIC-Die", "100000"),
            4: ("thermal-fan-est", "31350"),
        }
    ),
    f"{INA_NX}/name": "ina3221\n",
    f"{INA_NX}/in1_label": "VDD_IN\n",
    f"{INA_NX}/in1_input": "5080\n",
    f"{INA_NX}/curr1_input": "1200\n",
    f"{INA_NX}/in2_label": "VDD_CPU_GPU_CV\n",
    f"{INA_NX}/in2_input": "5064\n",
    f"{INA_NX}/curr2_input": "424\n",
    f"{INA_NX}/in3_label": "VDD_SOC\n",
    f"{INA_NX}/in3_input": "5072\n",
    f"{INA_NX}/curr3_input": "208\n",
    **_cpus({i: 1190400 for i in range(6)}, {i: 1 for i in range(1, 6)}),
    "sys/class/hwmon/hwmon0/name": "pwmfan\n",
    "sys/class/hwmon/hwmon0/pwm1": "255\n",
}

IIO_TX2_A = "sys/bus/i2c/drivers/ina3221x/0-0040/iio:device0"
IIO_TX2_B = "sys/bus/i2c/drivers/ina3221x/0-0041/iio:device1"
TX2: dict[str, str] = {
    "proc/device-tree/model": "quill\x00",
    "proc/device-tree/compatible": "nvidia,quill\x00nvidia,tegra186\x00",
    "etc/nv_tegra_release": (
        "# R32 (release), REVISION: 7.1, GCID: 33333333, BOARD: t186ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:05:08 UTC 2022\n"
    ),
    "etc/nvpmodel.conf": "< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=3 NAME=MAXP_CORE_ARM >\n< PM_CONFIG DEFAULT=3 >\n",
    "sys/class/devfreq/17000000.gp10b/cur_freq": "114750000\n",
    "sys/class/devfreq/17000000.gp10b/min_freq": "114750000\n",
    "sys/class/devfreq/17000000.gp10b/max_freq": "1300500000\n",
    "sys/devices/gpu.0/load": "0\n",
    **_thermal({0: ("BCPU-therm", "39000"), 1: ("MCPU-therm", "39000"), 2: ("GPU-therm", "37000")}),
    f"{IIO_TX2_A}/rail_name_0": "VDD_SYS_GPU\n",
    f"{IIO_TX2_A}/in_power0_input": "77\n",
    f"{IIO_TX2_A}/in_voltage0_input": "19144\n",
    f"{IIO_TX2_A}/in_current0_input": "4\n",
    f"{IIO_TX2_A}/rail_name_1": "VDD_SYS_SOC\n",
    f"{IIO_TX2_A}/in_power1_input": "539\n",
    f"{IIO_TX2_A}/rail_name_2": "VDD_4V0_WIFI\n",  # no power file: from mV x mA
    f"{IIO_TX2_A}/in_voltage2_input": "4000\n",
    f"{IIO_TX2_A}/in_current2_input": "5\n",
    f"{IIO_TX2_B}/rail_name_0": "VDD_IN\n",
    f"{IIO_TX2_B}/in_power0_input": "2930\n",
    f"{IIO_TX2_B}/rail_name_1": "VDD_SYS_CPU\n",
    f"{IIO_TX2_B}/in_power1_input": "539\n",
    f"{IIO_TX2_B}/rail_name_2": "VDD_SYS_DDR\n",
    f"{IIO_TX2_B}/in_power2_input": "727\n",
    **_cpus(
        {0: 2035200, 1: 2035200, 2: 2035200, 3: 345600, 4: 345600, 5: 345600},
        {0: 1, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1},
    ),
    "sys/kernel/debug/bpmp/debug/clk/emc/rate": "1600000000\n",
    "sys/devices/pwm-fan/target_pwm": "77\n",
    "sys/devices/pwm-fan/rpm_measured": "0\n",
}


@pytest.fixture
def orin_nano(tmp_path: Path) -> Path:
    return build_tree(tmp_path, ORIN_NANO, ORIN_NANO_LINKS)


@pytest.fixture
def xavier_nx(tmp_path: Path) -> Path:
    return build_tree(tmp_path, XAVIER_NX)


@pytest.fixture
def tx2(tmp_path: Path) -> Path:
    return build_tree(tmp_path, TX2)


# ---------------------------------------------------------------------------- detect_jetson


def test_detect_orin_nano(orin_nano: Path) -> None:
    board = detect_jetson(orin_nano)
    assert board is not None
    assert board.model == "NVIDIA Jetson Orin Nano Developer Kit"
    assert board.compatible == ("nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234")
    assert board.soc == "tegra234"
    assert (board.l4t_release, board.l4t_major, board.l4t_revision) == ("36.4.3", 36, "4.3")
    assert board.l4t_board == "generic" and board.jetpack_version == "6.2"
    # nvpmodel.conf is an absolute symlink: followed inside the tree, not on this host.
    assert board.power_modes == {0: "15W", 1: "7W"} and board.power_mode_default_id == 0
    assert (board.power_mode_id, board.power_mode_name) == (1, "7W")


def test_detect_xavier_nx(xavier_nx: Path) -> None:
    board = detect_jetson(xavier_nx)
    assert board is not None
    assert board.soc == "tegra194" and board.l4t_release == "35.4.1" and board.jetpack_version == "5.1.2"
    assert (board.power_mode_id, board.power_mode_name, board.power_mode_default_id) == (
        8,
        "MODE_20W_6CORE",
        2,
    )


def test_detect_tx2_without_nvpmodel_status(tx2: Path) -> None:
    board = detect_jetson(tx2)
    assert board is not None
    assert board.model == "quill" and board.soc == "tegra186"
    assert board.l4t_release == "32.7.1" and board.jetpack_version == "4.6.1" and board.l4t_board == "t186ref"
    assert board.power_mode_id is None and board.power_mode_name is None
    assert board.power_mode_default_id == 3 and board.power_modes == {0: "MAXN", 3: "MAXP_CORE_ARM"}


def test_detect_from_release_file_alone(tmp_path: Path) -> None:
    build_tree(tmp_path, {"etc/nv_tegra_release": "# R39 (release), REVISION: 2, GCID: 1, BOARD: generic\n"})
    board = detect_jetson(tmp_path)
    assert board is not None
    assert board.model is None and board.compatible == () and board.soc is None
    assert board.l4t_release == "39.2" and board.jetpack_version == "7.2"
    assert board.power_mode_id is None and board.power_modes == {}


def test_detect_from_device_tree_alone_with_firmware_fallback(tmp_path: Path) -> None:
    build_tree(tmp_path, {"sys/firmware/devicetree/base/model": "NVIDIA Jetson AGX Thor Developer Kit\x00"})
    board = detect_jetson(tmp_path)
    assert board is not None and board.model == "NVIDIA Jetson AGX Thor Developer Kit"
    assert board.l4t_release is None and board.jetpack_version is None


def test_not_a_jetson(tmp_path: Path) -> None:
    assert detect_jetson(tmp_path) is None
    build_tree(tmp_path, {"proc/device-tree/model": "Raspberry Pi 4 Model B Rev 1.4\x00"})
    assert detect_jetson(tmp_path) is None


def test_unknown_release_maps_to_no_jetpack(tmp_path: Path) -> None:
    build_tree(
        tmp_path, {"etc/nv_tegra_release": "# R36 (release), REVISION: 9.9, GCID: 1, BOARD: generic\n"}
    )
    board = detect_jetson(tmp_path)
    assert board is not None and board.l4t_release == "36.9.9" and board.jetpack_version is None


@pytest.mark.parametrize(
    ("release", "jetpack"),
    [
        ("32.7.1", "4.6.1"),
        ("35.4.1", "5.1.2"),
        ("36.4.4", "6.2.1"),
        ("38.4", "7.1"),
        ("39.2", "7.2"),
        ("99.1", None),
    ],
)
def test_jetpack_for_l4t(release: str, jetpack: str | None) -> None:
    assert jetpack_for_l4t(release) == jetpack


def test_jetpack_table_keys_are_full_releases() -> None:
    assert all(len(key.split(".")) == 3 for key in L4T_TO_JETPACK)


# ------------------------------------------------------------------------ read_jetson_sysfs


def test_read_orin_nano(orin_nano: Path) -> None:
    r = read_jetson_sysfs(orin_nano)
    assert r.gpu_devfreq == "17000000.gpu"
    assert r.gpu_load_pct == 34.5  # from the devfreq node's device/load
    assert (r.gpu_freq_mhz, r.gpu_min_freq_mhz, r.gpu_max_freq_mhz) == (306, 306, 624)
    assert r.jetson_clocks_on is False
    assert r.emc_freq_mhz == 2133
    assert r.thermal_zones == (
        JetsonThermalZone(0, "cpu-thermal", 47.5),
        JetsonThermalZone(1, "gpu-thermal", 46.031),
        JetsonThermalZone(2, "cv0-thermal", None),
        JetsonThermalZone(3, "cv1-thermal", None),
        JetsonThermalZone(10, "tj-thermal", 48.0),
    )
    assert r.temps_c == {"cpu-thermal": 47.5, "gpu-thermal": 46.031, "tj-thermal": 48.0}
    assert r.rails == (
        JetsonRail("VDD_IN", 5005, 5000, 1001),
        JetsonRail("VDD_CPU_GPU_CV", 599, 4990, 120),
        JetsonRail("VDD_SOC", 1503, 5010, 300),
    )
    assert r.cpu_cores == (
        JetsonCpuCore(0, True, 729),  # no online file: the system-wide list says so
        JetsonCpuCore(1, True, 729),
        JetsonCpuCore(2, True, 729),
        JetsonCpuCore(3, True, 1510),
        JetsonCpuCore(4, False, None),
        JetsonCpuCore(5, False, None),
    )
    assert (r.fan_pwm, r.fan_rpm, r.fan_pct) == (102, 2410, 40.0)


def test_read_xavier_nx(xavier_nx: Path) -> None:
    r = read_jetson_sysfs(xavier_nx)
    assert r.gpu_devfreq == "17000000.gv11b" and r.gpu_load_pct == 51.2 and r.gpu_freq_mhz == 1109
    assert r.jetson_clocks_on is True
    assert r.emc_freq_mhz is None  # debugfs not readable
    assert r.rails_mw == {"VDD_IN": 6096, "VDD_CPU_GPU_CV": 2147, "VDD_SOC": 1055}
    assert [z.name for z in r.thermal_zones] == [
        "AUX-therm",
        "CPU-therm",
        "GPU-therm",
        "PMIC-Die",
        "thermal-fan-est",
    ]
    assert r.temps_c["PMIC-Die"] == 100.0
    # cpu0 has no online file and there is no system-wide list: unknown, its clock still read.
    assert r.cpu_cores[0] == JetsonCpuCore(0, None, 1190)
    assert all(core.online for core in r.cpu_cores[1:]) and len(r.cpu_cores) == 6
    assert (r.fan_pwm, r.fan_rpm, r.fan_pct) == (255, None, 100.0)


def test_read_tx2(tx2: Path) -> None:
    r = read_jetson_sysfs(tx2)
    assert r.gpu_devfreq == "17000000.gp10b" and r.gpu_load_pct == 0.0 and r.gpu_freq_mhz == 114
    assert r.gpu_max_freq_mhz == 1300 and r.jetson_clocks_on is False
    assert r.emc_freq_mhz == 1600
    assert r.rails == (
        JetsonRail("VDD_SYS_GPU", 77, 19144, 4),
        JetsonRail("VDD_SYS_SOC", 539),
        JetsonRail("VDD_4V0_WIFI", 20, 4000, 5),
        JetsonRail("VDD_IN", 2930),
        JetsonRail("VDD_SYS_CPU", 539),
        JetsonRail("VDD_SYS_DDR", 727),
    )
    assert [(c.online, c.freq_mhz) for c in r.cpu_cores] == [
        (True, 2035),
        (False, None),
        (False, None),
        (True, 345),
        (True, 345),
        (True, 345),
    ]
    assert r.temps_c == {"BCPU-therm": 39.0, "MCPU-therm": 39.0, "GPU-therm": 37.0}
    assert (r.fan_pwm, r.fan_rpm) == (77, 0)


def test_empty_root_reads_nothing(tmp_path: Path) -> None:
    assert read_jetson_sysfs(tmp_path) == JetsonSysfsReading()
    r = read_jetson_sysfs(tmp_path / "does-not-exist")
    assert r.gpu_load_pct is None and r.rails == () and r.temps_c == {} and r.fan_pct is None


@pytest.mark.parametrize(
    "missing",
    [
        "sys/class/devfreq/17000000.gpu/cur_freq",
        "sys/class/devfreq/17000000.gpu/min_freq",
        "sys/devices/platform/bus@0/17000000.gpu/load",
        "sys/kernel/debug/bpmp/debug/clk/emc/rate",
        f"{INA_ORIN}/curr2_input",
        "sys/class/hwmon/hwmon2/pwm1",
        "sys/devices/system/cpu/online",
    ],
)
def test_missing_files_give_none(tmp_path: Path, missing: str) -> None:
    files = {k: v for k, v in ORIN_NANO.items() if k != missing}
    r = read_jetson_sysfs(build_tree(tmp_path, files, ORIN_NANO_LINKS))
    expected = {
        "sys/class/devfreq/17000000.gpu/cur_freq": lambda: (
            r.gpu_freq_mhz is None and r.gpu_max_freq_mhz == 624
        ),
        "sys/class/devfreq/17000000.gpu/min_freq": lambda: (
            r.jetson_clocks_on is None and r.gpu_freq_mhz == 306
        ),
        "sys/devices/platform/bus@0/17000000.gpu/load": lambda: r.gpu_load_pct is None,
        "sys/kernel/debug/bpmp/debug/clk/emc/rate": lambda: r.emc_freq_mhz is None,
        f"{INA_ORIN}/curr2_input": lambda: r.rails[1] == JetsonRail("VDD_CPU_GPU_CV", None, 4990, None),
        "sys/class/hwmon/hwmon2/pwm1": lambda: r.fan_pwm is None and r.fan_rpm == 2410,
        "sys/devices/system/cpu/online": lambda: r.cpu_cores[0].online is None,
    }
    assert expected[missing]()


def test_garbled_and_unreadable_files_give_none(tmp_path: Path) -> None:
    build_tree(
        tmp_path,
        {
            "sys/class/devfreq/17000000.ga10b/cur_freq": "not a number\n",
            "sys/class/devfreq/17000000.ga10b/min_freq": "\n",
            "sys/devices/platform/gpu.0/load/oops": "a directory where a file should be",
            "sys/class/thermal/thermal_zone0/type": "cpu-thermal\n",
            "sys/class/thermal/thermal_zone0/temp": "\xff\xfe\n",
            "sys/devices/system/cpu/online": "garbage\n",
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "x\n",
            "etc/nv_tegra_release": "not the release line\n",
            "etc/nvpmodel.conf": "<<< nonsense >>>\n",
            "var/lib/nvpmodel/status": "pmode:\n",
        },
    )
    r = read_jetson_sysfs(tmp_path)
    assert r.gpu_devfreq == "17000000.ga10b"
    assert (r.gpu_freq_mhz, r.gpu_min_freq_mhz, r.gpu_load_pct, r.jetson_clocks_on) == (
        None,
        None,
        None,
        None,
    )
    assert r.thermal_zones == (JetsonThermalZone(0, "cpu-thermal", None),)
    assert r.cpu_cores == (JetsonCpuCore(0, None, None),)
    assert detect_jetson(tmp_path) is None  # nothing readable says Jetson


def test_orin_l4t35_gpu_load_path_and_t210_emc_path(tmp_path: Path) -> None:
    build_tree(
        tmp_path,
        {
            "sys/class/devfreq/17000000.ga10b/cur_freq": "1300500000\n",
            "sys/devices/platform/gpu.0/load": "999\n",
            "sys/kernel/debug/clk/emc/clk_rate": "1600000000\n",
        },
    )
    r = read_jetson_sysfs(tmp_path)
    assert (r.gpu_devfreq, r.gpu_freq_mhz, r.gpu_load_pct, r.emc_freq_mhz) == (
        "17000000.ga10b",
        1300,
        99.9,
        1600,
    )


def test_thor_gpc_devfreq_is_preferred_to_the_video_node(tmp_path: Path) -> None:
    build_tree(
        tmp_path,
        {
            "sys/class/devfreq/gpu-nvd-0/cur_freq": "900000000\n",
            "sys/class/devfreq/gpu-gpc-0/cur_freq": "1575000\n",  # kHz: cannot be Hz for a GPU
            "sys/class/devfreq/gpu-gpc-0/min_freq": "1575000\n",
            "sys/class/devfreq/gpu-gpc-0/max_freq": "1575000\n",
        },
    )
    r = read_jetson_sysfs(tmp_path)
    assert (r.gpu_devfreq, r.gpu_freq_mhz, r.jetson_clocks_on, r.gpu_load_pct) == (
        "gpu-gpc-0",
        1575,
        True,
        None,
    )


def test_hwmon_skips_nc_channels_and_channels_without_values(tmp_path: Path) -> None:
    hwmon = "sys/class/hwmon/hwmon5"
    build_tree(
        tmp_path,
        {
            f"{hwmon}/name": "ina3221\n",
            f"{hwmon}/in1_label": "NC\n",
            f"{hwmon}/in1_input": "0\n",
            f"{hwmon}/curr1_input": "0\n",
            f"{hwmon}/in2_label": "VDDQ_VDD2_1V8AO\n",
            f"{hwmon}/in2_input": "1800\n",
            f"{hwmon}/curr2_input": "341\n",
            f"{hwmon}/in3_label": "VDD_UNWIRED\n",
            "sys/class/hwmon/hwmon6/name": "some_other_sensor\n",
            "sys/class/hwmon/hwmon6/in1_label": "NOT_A_RAIL\n",
            "sys/class/hwmon/hwmon6/in1_input": "1\n",
            "sys/class/hwmon/hwmon6/curr1_input": "1\n",
        },
    )
    assert read_jetson_sysfs(tmp_path).rails == (JetsonRail("VDDQ_VDD2_1V8AO", 614, 1800, 341),)
