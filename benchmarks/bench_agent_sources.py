"""The agent's CPU and RSS with its device sources, at a 1 s interval.

    python benchmarks/bench_agent_sources.py --source nvml --gpus 8 --seconds 60
    python benchmarks/bench_agent_sources.py --source jetson --seconds 60

Runs the real Agent (spool, uplink, gRPC to a collector in another process) in this process
with the host sampler plus either NVML over the fake pynvml presenting N GPUs (readings from
a synthetic full recording) or the Jetson sources over a recorded sysfs tree and tegrastats
lines from a command. Prints this process's CPU share and RSS over the steady state, and the
CPU per GPU per sample measured around the sampler alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


class Timed:
    """Wraps a sampler to account the CPU its sample() takes."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.name, self.cpu, self.calls = inner, inner.name, 0.0, 0

    def sample(self, now_ns: int):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        out = self.inner.sample(now_ns)
        self.cpu += time.thread_time() - t
        self.calls += 1
        return out

    def inventory(self):  # type: ignore[no-untyped-def]
        return self.inner.inventory()

    def close(self) -> None:
        self.inner.close()


def nvml_sampler(gpus: int):  # type: ignore[no-untyped-def]
    from fleetscope.agent.samplers.nvml import NvmlSampler
    from fleetscope.agent.testing.fake_nvml import FakeNvml, example_recording, replicate

    return NvmlSampler(nvml=FakeNvml(replicate(example_recording(), gpus))), gpus


def jetson_sampler(tmp: Path):  # type: ignore[no-untyped-def]
    # The Orin Nano tree the Jetson tests are written against (tests/agent/test_jetson_sysfs.py).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fleetscope.agent.samplers.jetson import JetsonSampler
    from tests.agent.test_jetson_sysfs import ORIN_NANO, ORIN_NANO_LINKS, build_tree

    root = build_tree(tmp / "sysfs", ORIN_NANO, ORIN_NANO_LINKS)
    return JetsonSampler(sysfs_root=root), 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=["nvml", "jetson"], default="nvml")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs behind the fake NVML (default 8)")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()

    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.samplers.host import HostSampler

    tmp = Path(tempfile.mkdtemp(prefix="fleetscope-bench-src-"))
    port = free_port()
    collector = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"127.0.0.1:{port}", "--db",
                                  f"sqlite:///{tmp}/c.db", "--token", "t"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    sampler, gpus = nvml_sampler(args.gpus) if args.source == "nvml" else jetson_sampler(tmp)
    timed = Timed(sampler)
    agent = Agent(AgentSettings(collectors=(f"127.0.0.1:{port}",), spool_dir=tmp / "spool", token="t", name="bench"),
                  samplers=[HostSampler(), timed])
    agent.start()
    time.sleep(5)  # imports and first samples are not the steady state
    c0, t0, s0, n0 = cpu_s(), time.monotonic(), timed.cpu, timed.calls
    rss_max = 0
    while time.monotonic() - t0 < args.seconds:
        time.sleep(1)
        rss_max = max(rss_max, rss_bytes())
        print(f"  [{time.monotonic() - t0:.0f}/{args.seconds:.0f}s] acked {agent.uplink.status.acked}", file=sys.stderr, end="\r")
    cpu, wall = cpu_s() - c0, time.monotonic() - t0
    per_sample_ms = (timed.cpu - s0) / max(1, timed.calls - n0) * 1000
    agent.stop()
    collector.terminate()
    collector.wait(30)
    print(f"\nsource={args.source} gpus={gpus}: agent CPU {100 * cpu / wall:.2f} % of one core, RSS max {rss_max / 2**20:.1f} MiB; "
          f"{args.source} sample() {per_sample_ms:.2f} ms CPU = {per_sample_ms / gpus:.3f} ms per GPU per sample")
    os.system(f"rm -rf {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
