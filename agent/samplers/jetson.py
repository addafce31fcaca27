"""A Jetson's state from sysfs: cheaper than spawning tegrastats every second.

Each sample reads the GPU load and frequency, thermal zones, INA3221 power rails, CPU
frequencies, EMC frequency and fan through ``fleetscope.agent.parsers.jetson_sysfs`` (every
file optional). The integrated GPU becomes GPU sample 0; the rest become metrics
(``jetson.power_mw`` per rail, ``jetson.temp_c`` per zone, ``jetson.fan_percent``,
``jetson.emc_mhz``, ``jetson.jetson_clocks`` 0/1, ``jetson.nvpmodel_id``). What sysfs cannot
give (EMC load, engines such as NVENC/NVDLA) needs tegrastats: ``--tegrastats-cmd``.

``sysfs_root`` is a parameter so tests and benchmarks point it at a recorded tree.
"""

from __future__ import annotations

from pathlib import Path

from fleetscope.agent.parsers.jetson_sysfs import (
    JetsonBoard,
    JetsonSysfsReading,
    detect_jetson,
    read_jetson_sysfs,
)
from fleetscope.agent.records import GpuInfo, GpuSample
from fleetscope.agent.samplers._base import SampleSet, SourceUnavailable
from fleetscope.proto.v1 import telemetry_pb2 as pb


def _gpu_temp(reading: JetsonSysfsReading) -> float | None:
    for zone in reading.thermal_zones:
        if zone.name.lower().startswith("gpu") and zone.temp_c is not None:
            return zone.temp_c
    return None


def _gpu_power_w(reading: JetsonSysfsReading) -> float | None:
    for rail in reading.rails:
        if "GPU" in rail.name.upper() and rail.power_mw is not None:
            return rail.power_mw / 1000.0
    return None


class JetsonSampler:
    name = "jetson-sysfs"

    def __init__(self, *, sysfs_root: Path | str = Path("/")) -> None:
        self._root = Path(sysfs_root)
        board = detect_jetson(self._root)
        if board is None:
            raise SourceUnavailable(f"no Jetson board found under {self._root}")
        self.board: JetsonBoard = board
        self._samples = 0

    @staticmethod
    def available(root: Path | str = Path("/")) -> bool:
        return detect_jetson(Path(root)) is not None

    def inventory(self) -> list[GpuInfo]:
        return [GpuInfo(index=0, name=f"{self.board.model or 'Jetson'} integrated GPU")]

    def inventory_fields(self, inv: pb.Inventory) -> None:
        """Board facts for the registration's inventory."""
        inv.board_model = self.board.model or ""
        inv.l4t_release = self.board.l4t_release or ""
        inv.jetpack_version = self.board.jetpack_version or ""

    def sample(self, now_ns: int) -> SampleSet:
        self._samples += 1
        if self._samples % 60 == 0:  # nvpmodel can be switched at run time: look again each minute
            self.board = detect_jetson(self._root) or self.board
        r = read_jetson_sysfs(self._root)
        gpu = GpuSample(
            ts_ns=now_ns,
            gpu_index=0,
            util_gpu_percent=r.gpu_load_pct,
            sm_clock_mhz=None if r.gpu_freq_mhz is None else float(r.gpu_freq_mhz),
            graphics_clock_mhz=None if r.gpu_freq_mhz is None else float(r.gpu_freq_mhz),
            sm_clock_max_mhz=None if r.gpu_max_freq_mhz is None else float(r.gpu_max_freq_mhz),
            memory_clock_mhz=None if r.emc_freq_mhz is None else float(r.emc_freq_mhz),
            temp_c=_gpu_temp(r),
            power_w=_gpu_power_w(r),
            fan_percent=r.fan_pct,
        )
        out = SampleSet(gpu=[gpu])

        def point(name: str, value: float, **labels: str) -> None:
            m = pb.MetricPoint(name=name, ts_ns=now_ns, value=float(value))
            m.labels.update(labels)
            out.metrics.append(m)

        for rail in r.rails:
            if rail.power_mw is not None:
                point("jetson.power_mw", rail.power_mw, rail=rail.name)
        for zone in r.thermal_zones:
            if zone.temp_c is not None:
                point("jetson.temp_c", zone.temp_c, sensor=zone.name)
        if r.fan_pct is not None:
            point("jetson.fan_percent", r.fan_pct)
        if r.emc_freq_mhz is not None:
            point("jetson.emc_mhz", r.emc_freq_mhz)
        if r.jetson_clocks_on is not None:
            point("jetson.jetson_clocks", 1.0 if r.jetson_clocks_on else 0.0)
        if self.board.power_mode_id is not None:
            point("jetson.nvpmodel_id", self.board.power_mode_id, mode=self.board.power_mode_name or "")
        return out

    def close(self) -> None:
        pass
