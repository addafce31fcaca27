"""Classifier throughput: every registered classifier over a large log of ordinary lines.

    python benchmarks/bench_classify.py --mb 100

The log mixes what training and inference jobs really print (step/loss lines, data-loader and
checkpoint messages, dmesg noise, HTTP access lines, tracebacks of ordinary errors) with a
few real incidents, and is fed line by line the way the agent does. Prints MB/s on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

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


def make_log(target_bytes: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    lines, size = [], 0
    while size < target_bytes:
        t = rng.choice(ORDINARY)
        line = t.format(m=rng.randrange(60), s=rng.randrange(60), ms=rng.randrange(1000), e=rng.randrange(90), n=rng.randrange(10**6),
                        loss=rng.random(), g=rng.random() * 3, r=rng.randrange(8), h=rng.getrandbits(40), it=rng.random() * 50,
                        q=rng.randrange(1, 64), up=rng.random() * 10**5)
        lines.append(line)
        size += len(line) + 1
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=100.0, help="log size in MB (default %(default)s)")
    args = parser.parse_args()
    from fleetscope.agent.classify import classify_text, registry

    print(f"building a {args.mb:.0f} MB log...", file=sys.stderr)
    lines = make_log(int(args.mb * 1e6))
    total = sum(len(x) + 1 for x in lines)
    names = registry().names()
    t0 = time.process_time()
    found = 0
    for i, line in enumerate(lines):
        found += len(classify_text(line))
        if i % 200_000 == 0 and i:
            print(f"  {i:,} lines...", file=sys.stderr)
    cpu = time.process_time() - t0
    print(f"classifiers: {', '.join(names)}")
    print(f"{total / 1e6:.1f} MB, {len(lines):,} lines in {cpu:.2f} s CPU: {total / 1e6 / cpu:.1f} MB/s, "
          f"{len(lines) / cpu:,.0f} lines/s on one core; findings: {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
