"""Classifier throughput: ``fleetscope scan`` and the classifiers over a large log of ordinary lines.

    python benchmarks/bench_classify.py --mb 100
    python benchmarks/bench_classify.py --mb 100 --baseline HEAD --rounds 3

The log mixes what training and inference jobs really print (step/loss lines, data-loader and
checkpoint messages, dmesg noise, HTTP access lines, tracebacks of ordinary errors) with a
few real incidents. It is written to a temporary file and measured two ways, each in CPU seconds
of one process (so on one core):

* ``scan``: ``fleetscope.agent.tools.scan.scan_file`` over the file: reading, the grouper and the
  classifiers, as ``fleetscope scan`` runs them. The first scan in a process also builds the
  classifier registry and compiles the gates (tens of milliseconds): ``scan``
  is that first scan, start included; ``steady`` a second scan of the same file in the same
  process, the rate a long scan runs at; ``start`` their difference in seconds;
* ``classify``: ``classify_text`` on each line, the way the agent feeds a line that opens no block.

``--baseline REF`` measures the agent code of git revision REF (its ``agent/`` and ``proto/``,
extracted to a temporary directory) on the same file, alternating with the working tree round by
round, and prints both side by side. Each measurement runs in a fresh process.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ORDINARY = [
    "2026-12-02 10:{m:02d}:{s:02d},{ms:03d} INFO trainer: epoch {e} step {n} loss {loss:.4f} lr 3.0e-04 grad_norm {g:.3f}",
    "[rank{r}]:[I1202 10:{m:02d}:{s:02d}.{ms:03d}] ProcessGroupNCCL.cpp:1234 NCCL INFO comm 0x{h:x} rank {r} nranks 8 - Init COMPLETE",
    "{n}it [00:{m:02d}:{s:02d}, {it:.2f}it/s] dataloader: prefetch queue {q}/16 workers=8 pin_memory=True",
    "Saving checkpoint to /checkpoints/run-{e}/step-{n}.pt (1.{ms:03d} GB) in {it:.1f} s",
    "[{up:>12.6f}] eth0: renamed from veth{h:x}; IPv6: ADDRCONF(NETDEV_CHANGE): link becomes ready",
    "[{up:>12.6f}] audit: type=1400 audit({up:.3f}:{n}): apparmor=\"ALLOWED\" operation=\"open\" profile=\"docker-default\"",
    '127.0.0.1 - - [02/Dec/2026:10:{m:02d}:{s:02d} +0000] "POST /v2/models/yolo/infer HTTP/1.1" 200 {n} "-" "triton-client"',
    "I1202 10:{m:02d}:{s:02d}.{ms:06d} {n} infer_request.cc:{r}] [request id: {h}] Inference latency p50={it:.2f}ms batch={q}",
    "WARNING: the data loader is slow: {it:.1f} ms waiting for batch {n} (consider num_workers > {q})",
    "  File \"/opt/app/train.py\", line {r}, in forward",
    "ValueError: expected input of size [{q}, 3, 224, 224] but got [{q}, 3, 256, 256]",
    "RAM 2448/3964MB (lfb 1x4MB) SWAP 0/1982MB (cached 0MB) CPU [12%@1479,9%@1479,off,off] EMC_FREQ 0% GR3D_FREQ {q}%@76",
]
# A few real incidents, so the measured path includes finding them (one in about 50,000 lines).
INCIDENTS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use.",
    "[ 5000.000007] Out of memory: Killed process 777 (python3) total-vm:9000000kB, anon-rss:8000000kB, "
    "file-rss:1000kB, shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0",
    "[ 6000.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python, GPU has fallen off the bus.",
]


def make_log(target_bytes: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    lines, size = [], 0
    while size < target_bytes:
        if rng.random() < 2e-5:
            line = rng.choice(INCIDENTS)
        else:
            t = rng.choice(ORDINARY)
            line = t.format(m=rng.randrange(60), s=rng.randrange(60), ms=rng.randrange(1000), e=rng.randrange(90),
                            n=rng.randrange(10**6), loss=rng.random(), g=rng.random() * 3, r=rng.randrange(8),
                            h=rng.getrandbits(40), it=rng.random() * 50, q=rng.randrange(1, 64), up=rng.random() * 10**5)
        lines.append(line)
        size += len(line) + 1
    return lines


def measure(path: str) -> dict[str, float]:
    """One process's figures for the file at ``path`` (run with the code under test importable)."""
    from fleetscope.agent.classify import classify_text
    from fleetscope.agent.tools.scan import scan_file

    size = os.path.getsize(path)
    t0 = time.process_time()
    result = scan_file(path)
    scan_cpu = time.process_time() - t0
    t0 = time.process_time()
    scan_file(path)  # the registry is built and the gate's regexes compiled: the steady rate
    steady_cpu = time.process_time() - t0
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    t0 = time.process_time()
    found = 0
    for line in lines:
        found += len(classify_text(line))
    classify_cpu = time.process_time() - t0
    return {
        "mb": size / 1e6,
        "lines": len(lines),
        "scan_mb_s": size / 1e6 / scan_cpu,
        "steady_mb_s": size / 1e6 / steady_cpu,
        "start_s": scan_cpu - steady_cpu,
        "scan_findings": len(result.findings),
        "classify_mb_s": size / 1e6 / classify_cpu,
        "classify_findings": found,
    }


def _extract(repo: Path, ref: str, into: Path) -> str:
    """``agent/`` and ``proto/`` of ``ref`` as an importable ``fleetscope`` package; its commit."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    tar = subprocess.run(["git", "-C", str(repo), "archive", ref, "agent", "proto"], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into / "fleetscope")  # noqa: S202 - our own repository's archive
    return commit


def _child(path: str, pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, __file__, "--child", path], check=True, capture_output=True, text=True,
                         env=env, cwd=tempfile.gettempdir())
    return json.loads(out.stdout)


def _cell(rates: list[float]) -> str:
    return f"{max(rates):>6.1f}  ({', '.join(f'{x:.1f}' for x in rates)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=100.0, help="log size in MB (default %(default)s)")
    parser.add_argument("--baseline", metavar="REF", help="also measure git revision REF, side by side")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of each (default %(default)s)")
    parser.add_argument("--child", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ordinary.log")
        print(f"building a {args.mb:.0f} MB log...", file=sys.stderr)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(make_log(int(args.mb * 1e6))) + "\n")
        variants: list[tuple[str, str | None]] = [("working tree", None)]
        if args.baseline:
            base = Path(tmp) / "baseline"
            commit = _extract(Path(__file__).resolve().parents[1], args.baseline, base)
            variants.insert(0, (f"{args.baseline} ({commit})", str(base)))
        rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
        for r in range(args.rounds):
            for name, pp in variants:  # alternated, so drift on a shared machine hits both alike
                rows[name].append(_child(path, pp))
                print(f"  round {r + 1}: {name} done", file=sys.stderr)
        first = next(iter(rows.values()))[0]
        print(f"{first['mb']:.1f} MB, {int(first['lines']):,} lines; CPU time of one process (one core)")
        print(f"{'code':<28} {'scan MB/s (best, all)':<30} {'steady MB/s (best, all)':<30} "
              f"{'start s':<8} {'classify_text MB/s':<19} findings")
        for name, ms in rows.items():
            scans = [m["scan_mb_s"] for m in ms]
            steady = [m["steady_mb_s"] for m in ms]
            start = min(m["start_s"] for m in ms)
            print(f"{name:<28} {_cell(scans):<30} {_cell(steady):<30} {start:>7.3f}  "
                  f"{max(m['classify_mb_s'] for m in ms):>8.1f}{'':<11} {int(ms[0]['scan_findings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
