"""A Jetson's state from ``tegrastats`` lines, taken from any command.

The default command is ``tegrastats --interval <ms>``; ``fleetscope agent --tegrastats-cmd
"cat FILE"`` replays a recorded file instead, and its samples then appear in ``fleetscope
metrics`` like live ones. Lines are read on a daemon thread into a bounded queue, so a stalled
command never blocks the agent loop. Lines that arrive together (a replayed file) are spaced
back from their arrival at the sampling interval, so they keep their order and stay "live".

What a line says becomes:
- a host sample: RAM (shared with the GPU on a Jetson), swap, per-core load and frequency;
- a GPU sample for the integrated GPU (index 0): GR3D load and frequency, the GPU temperature,
  the GPU power rail, and RAM as its memory;
- metrics for the rest: every power rail (``jetson.power_mw``, label ``rail``; ``..._avg_mw``),
  every thermal sensor (``jetson.temp_c``, label ``sensor``), EMC load and frequency, and each
  engine's frequency (``jetson.engine_mhz``, label ``engine``; 0 when off).
"""

from __future__ import annotations

import collections
import logging
import shlex
import subprocess
import threading
import time

from fleetscope.agent.parsers.tegrastats import TegrastatsParseError, TegrastatsReading, parse_tegrastats_line
from fleetscope.agent.records import GpuInfo, GpuSample, HostSample
from fleetscope.agent.samplers._base import SampleSet, SourceUnavailable
from fleetscope.proto.v1 import telemetry_pb2 as pb

log = logging.getLogger(__name__)
MIB = 1024 * 1024


def default_command(interval_ms: int) -> list[str]:
    return ["tegrastats", "--interval", str(interval_ms)]


def _gpu_temp(reading: TegrastatsReading) -> float | None:
    for name in ("GPU", "gpu", "GPU-therm", "gpu-thermal"):
        if name in reading.temps_c:
            return reading.temps_c[name][0]
    return None


def _gpu_power_w(reading: TegrastatsReading) -> float | None:
    for name, values in reading.rails_mw.items():
        if "GPU" in name.upper():
            return values[0] / 1000.0
    return None


def reading_to_records(reading: TegrastatsReading, ts_ns: int) -> tuple[HostSample, GpuSample, list[pb.MetricPoint]]:
    cores = [c for c in reading.cpu_cores if c.load_pct is not None]
    host = HostSample(
        ts_ns=ts_ns,
        cpu_percent=sum(c.load_pct for c in cores) / len(cores) if cores else None,  # type: ignore[misc]
        cpu_core_percent=tuple(float(c.load_pct or 0) for c in reading.cpu_cores),
        cpu_core_freq_mhz=tuple(float(c.freq_mhz or 0) for c in reading.cpu_cores),
        mem_total_bytes=reading.ram_total_mb * MIB,
        mem_used_bytes=reading.ram_used_mb * MIB,
        mem_available_bytes=(reading.ram_total_mb - reading.ram_used_mb) * MIB,
        swap_total_bytes=None if reading.swap_total_mb is None else reading.swap_total_mb * MIB,
        swap_used_bytes=None if reading.swap_used_mb is None else reading.swap_used_mb * MIB,
    )
    freqs = reading.gr3d_freq_mhz or ()
    gpu = GpuSample(
        ts_ns=ts_ns,
        gpu_index=0,
        util_gpu_percent=None if reading.gr3d_load_pct is None else float(reading.gr3d_load_pct),
        sm_clock_mhz=float(max(freqs)) if freqs else None,
        graphics_clock_mhz=float(max(freqs)) if freqs else None,
        memory_clock_mhz=None if reading.emc_freq_mhz is None else float(reading.emc_freq_mhz),
        util_memory_percent=None if reading.emc_load_pct is None else float(reading.emc_load_pct),
        temp_c=_gpu_temp(reading),
        power_w=_gpu_power_w(reading),
        memory_used_bytes=reading.ram_used_mb * MIB,  # unified memory: the GPU allocates from RAM
        memory_total_bytes=reading.ram_total_mb * MIB,
    )
    metrics: list[pb.MetricPoint] = []

    def point(name: str, value: float, **labels: str) -> None:
        m = pb.MetricPoint(name=name, ts_ns=ts_ns, value=float(value))
        m.labels.update(labels)
        metrics.append(m)

    for rail, values in reading.rails_mw.items():
        point("jetson.power_mw", values[0], rail=rail)
        if len(values) > 1:
            point("jetson.power_avg_mw", values[1], rail=rail)
    for sensor, temps in reading.temps_c.items():
        if temps and temps[0] > -200:  # tegrastats prints -256 for a sensor that is off
            point("jetson.temp_c", temps[0], sensor=sensor)
    if reading.emc_load_pct is not None:
        point("jetson.emc_load_percent", reading.emc_load_pct)
    if reading.emc_freq_mhz is not None:
        point("jetson.emc_mhz", reading.emc_freq_mhz)
    for engine, mhz in reading.engines_mhz.items():
        point("jetson.engine_mhz", mhz or 0, engine=engine)
    return host, gpu, metrics


class TegrastatsSampler:
    name = "tegrastats"

    def __init__(self, command: str | list[str] | None = None, *, interval_s: float = 1.0, max_queued: int = 600) -> None:
        self._interval_s = interval_s
        argv = default_command(int(interval_s * 1000)) if command is None else (
            shlex.split(command) if isinstance(command, str) else list(command))
        try:
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError as exc:
            raise SourceUnavailable(f"cannot run {argv[0]!r}: {exc}") from exc
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=max_queued)
        self._lock = threading.Lock()
        self._bad = 0
        self._thread = threading.Thread(target=self._read, name="fleetscope-tegrastats", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.strip()
            if line:
                with self._lock:
                    self._lines.append((time.time_ns(), line))

    def inventory(self) -> list[GpuInfo]:
        return [GpuInfo(index=0, name="Jetson integrated GPU (nvgpu)")]

    def sample(self, now_ns: int) -> SampleSet:
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        out = SampleSet()
        step = int(self._interval_s * 1e9)
        for i, (_arrived, line) in enumerate(lines):
            try:
                reading = parse_tegrastats_line(line)
            except TegrastatsParseError as exc:
                self._bad += 1
                if self._bad == 1:
                    log.warning("tegrastats: %s (further bad lines are only counted)", exc)
                continue
            ts = now_ns - (len(lines) - 1 - i) * step
            host, gpu, metrics = reading_to_records(reading, ts)
            out.host.append(host)
            out.gpu.append(gpu)
            out.metrics.extend(metrics)
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._thread.join(2)
