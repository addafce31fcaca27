"""CPU time and memory of NvmlSampler over the fake NVML with N GPUs.

    .venv/bin/python benchmarks/bench_nvml_sampler.py --gpus 8 --samples 300

Prints the process CPU time (all threads: the sampler's loop and the NVML worker) per GPU
per sample, which the agent budget wants at or under 2 ms, and the RSS. The GPUs replay a
real capture from the shared corpus when it is there (``--capture``), else the fake's synthetic
fully populated recording; every GPU runs two processes whose /proc entries (comm, cgroup)
are laid out in a temporary tree, so the process-name/container path is measured too. Note the
fake answers instantly: on real GPUs NVML's own time (driver ioctls) comes on top.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
from pathlib import Path

from fleetscope.agent.samplers.nvml import NvmlSampler
from fleetscope.agent.testing.fake_nvml import (
    FakeNvml,
    example_recording,
    recording_from_nvidia_smi_xml,
    replicate,
)

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "nvidia-smi"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _recordings(capture: str | None, gpus: int) -> tuple[list[dict], str]:
    if capture:
        path = Path(capture)
        if not path.is_absolute() and not path.exists():
            path = CORPUS / capture
        rec = recording_from_nvidia_smi_xml(path.read_text(encoding="utf-8"))[0]
        label = path.name
    else:
        rec = example_recording()
        label = "synthetic example_recording()"
    recs = replicate(rec, gpus)
    for i, r in enumerate(recs):
        r["processes"] = [
            {"pid": 10000 + 2 * i, "name": "python3", "type": "C", "used_memory": 1 << 30},
            {"pid": 10001 + 2 * i, "name": "tritonserver", "type": "C", "used_memory": 2 << 30},
        ]
    return recs, label


def _proc_tree(root: Path, recs: list[dict]) -> None:
    for r in recs:
        for p in r["processes"]:
            d = root / str(p["pid"])
            d.mkdir(parents=True, exist_ok=True)
            (d / "comm").write_text(p["name"] + "\n")
            cid = f"{p['pid']:064x}"
            (d / "cgroup").write_text(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/"
                f"cri-containerd-{cid}.scope\n"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs the fake NVML presents (default 8)")
    ap.add_argument("--samples", type=int, default=300, help="sample() calls to time (default 300)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed samples first (default 5)")
    ap.add_argument(
        "--capture",
        default=None,
        help="nvidia-smi -q -x capture to replay on every GPU: a path, or a file name in the corpus "
        "(e.g. xml-telegraf-a10g.xml.txt); default: the fake's synthetic recording",
    )
    ap.add_argument(
        "--vary", action="store_true", help="let readings drift (the fake's deterministic sequence)"
    )
    ap.add_argument("--no-pcie-throughput", action="store_true", help="skip the PCIe throughput counters")
    args = ap.parse_args(argv)
    if args.gpus < 1 or args.samples < 1:
        ap.error("--gpus and --samples must be at least 1")

    recs, label = _recordings(args.capture, args.gpus)
    rss_before = _rss_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        _proc_tree(Path(tmp), recs)
        sampler = NvmlSampler(
            nvml=FakeNvml(recs, vary=args.vary),
            proc_root=tmp,
            pcie_throughput=not args.no_pcie_throughput,
        )
        try:
            inventory = sampler.inventory()
            for _ in range(args.warmup):
                sampler.sample(time.time_ns())
            gc.collect()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            gpu_records = 0
            for _ in range(args.samples):
                gpu_records += len(sampler.sample(time.time_ns()).gpu)
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - wall0
        finally:
            sampler.close()
    rss_after = _rss_bytes()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    per = cpu / (args.samples * len(inventory)) * 1e3
    print(f"recording:               {label}")
    print(
        f"devices:                 {len(inventory)} (GpuSample records per sample: {gpu_records / args.samples:.0f})"
    )
    print(f"samples:                 {args.samples}")
    print(
        f"CPU per sample:          {cpu / args.samples * 1e3:.3f} ms (wall {wall / args.samples * 1e3:.3f} ms)"
    )
    print(f"CPU per GPU per sample:  {per:.3f} ms (target <= 2 ms: {'ok' if per <= 2.0 else 'OVER'})")
    print(
        f"RSS:                     {rss_after / 2**20:.1f} MiB (before sampler {rss_before / 2**20:.1f} MiB, peak {maxrss / 2**20:.1f} MiB)"
    )
    print(f"python:                  {sys.version.split()[0]}")
    return 0 if per <= 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
