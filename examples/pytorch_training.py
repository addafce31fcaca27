"""Train a small classifier on synthetic data while fleetscope's SDK watches. Runs on a CPU.

    python examples/pytorch_training.py --epochs 2
    python examples/pytorch_training.py --epochs 1 --samples 512 --socket /tmp/agent.sock

What it shows: ``train_steps`` splitting each step into data wait and compute, ``steps.loss``
flagging NaN/Inf, a GradScaler watched for collapse (on a GPU with ``--amp``), ``oom_guard``
around the step, the OOM excepthook, ``check_environment`` on the model and loader, and
``sdk.metric`` for the learning rate and validation accuracy. Without an agent running, the
SDK drops what it would send and the program runs just the same.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8192, help="training samples per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    parser.add_argument(
        "--load-delay-ms", type=float, default=0.0, help="sleep per sample, to mimic slow I/O"
    )
    parser.add_argument("--amp", action="store_true", help="fp16 autocast + GradScaler (CUDA only)")
    parser.add_argument(
        "--socket", help="the agent's socket (default $FLEETSCOPE_SDK_SOCKET or /run/fleetscope)"
    )
    args = parser.parse_args(argv)

    import torch
    from torch.utils.data import DataLoader, Dataset

    from fleetscope.agent import sdk

    if args.socket:
        sdk.configure(socket=args.socket)
    sdk.configure(process_name="example-train", labels={"example": "pytorch_training"})
    sdk.install_oom_hook()  # an OOM nobody catches is still reported before the traceback

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    centers = torch.randn(10, 32) * 3

    class Blobs(Dataset):  # ten Gaussian blobs: learnable in a few hundred steps
        def __len__(self) -> int:
            return args.samples

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            if args.load_delay_ms:
                time.sleep(args.load_delay_ms / 1000)
            label = i % 10
            return centers[label] + torch.randn(32), torch.tensor(label)

    loader = DataLoader(
        Blobs(),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    ).to(device)

    env = sdk.check_environment(models={"classifier": model}, dataloaders={"train": loader})
    for finding in env.findings:
        print(f"environment: [{finding.severity}] {finding.title}")

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(loader))
    use_amp = args.amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    steps = sdk.train_steps(loader, name="train", scaler=scaler if use_amp else None)

    @sdk.oom_guard("train_step")  # an OOM here is reported with x's and y's shapes, then re-raised
    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.float16, enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        return loss

    for epoch in range(args.epochs):
        model.train()
        for x, y in steps:
            loss = train_step(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            steps.loss(loss.item())
            sdk.metric("train.lr", sched.get_last_lr()[0])
        model.eval()
        with torch.inference_mode(), sdk.latency("eval.epoch"):
            x = torch.stack([centers[i % 10] + torch.randn(32) for i in range(1000)]).to(device)
            y = torch.tensor([i % 10 for i in range(1000)], device=device)
            accuracy = (model(x).argmax(1) == y).float().mean().item()
        sdk.metric("val.accuracy", accuracy, epoch=epoch)
        print(f"epoch {epoch}: loss {steps.totals().last_loss:.4f} accuracy {accuracy:.3f}")

    totals = steps.totals()
    print(
        f"{totals.steps} steps, {totals.samples} samples: data wait {totals.data_wait_ns / 1e9:.3f} s, "
        f"compute {totals.compute_ns / 1e9:.3f} s ({(totals.data_wait_fraction or 0) * 100:.1f}% waiting for data)"
    )
    for s in sdk.latency_summaries():
        print(f"{s.name:18} n={s.count:<6} p50={s.p50_ns / 1e6:.3f} ms p99={s.p99_ns / 1e6:.3f} ms")
    reached = sdk.flush(2.0)
    print("reported to the agent" if reached else f"no agent reached ({sdk.stats().last_error})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
