"""Serve a small model at several batch sizes with per-batch-size latency histograms. CPU is fine.

    python examples/pytorch_inference.py --requests 500
    python examples/pytorch_inference.py --requests 50 --socket /tmp/agent.sock

What it shows: ``sdk.latency`` as a context manager with labels (one histogram per batch size)
and as a decorator, ``cuda="events"`` on a GPU so the timing covers the kernels without
stalling the host, ``oom_guard`` around the forward pass, and the local summaries the SDK
keeps (count, calls/s, p50/p99) next to what it sends.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--batch-sizes", default="1,8,32", help="comma-separated")
    parser.add_argument(
        "--socket", help="the agent's socket (default $FLEETSCOPE_SDK_SOCKET or /run/fleetscope)"
    )
    args = parser.parse_args(argv)

    import torch

    from fleetscope.agent import sdk

    if args.socket:
        sdk.configure(socket=args.socket)
    sdk.configure(process_name="example-infer", labels={"example": "pytorch_inference"})

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = (
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(8),
            torch.nn.Flatten(),
            torch.nn.Linear(16 * 64, 10),
        )
        .to(device)
        .eval()
    )
    sdk.check_environment(models={"convnet": model})
    # Events time the GPU work without a sync per request; on the CPU the mode falls back to the wall clock.
    cuda_mode = "events" if device.type == "cuda" else None
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    @sdk.latency("infer.preprocess")
    def preprocess(n: int) -> torch.Tensor:
        return torch.rand(n, 3, 32, 32).to(device, non_blocking=True)

    @sdk.oom_guard("infer.forward")
    def forward(x: torch.Tensor) -> torch.Tensor:
        with sdk.latency("infer.forward", cuda=cuda_mode, batch=x.shape[0]):
            return model(x)

    rng = random.Random(0)
    with torch.inference_mode():
        for _ in range(args.requests):
            out = forward(preprocess(rng.choice(batch_sizes)))
            sdk.metric("infer.top_score", out.softmax(1).max().item())

    for s in sdk.latency_summaries():
        label = ",".join(f"{k}={v}" for k, v in s.labels.items())
        print(
            f"{s.name:17} {label:9} n={s.count:<5} p50={s.p50_ns / 1e3:9.1f} us "
            f"p99={s.p99_ns / 1e3:9.1f} us errors={s.errors}"
        )
    reached = sdk.flush(2.0)
    print("reported to the agent" if reached else f"no agent reached ({sdk.stats().last_error})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
